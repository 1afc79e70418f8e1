"""The step recipe: what a training step does around the forward and backward of its pieces.

``StepRecipe`` holds a step's options, checked once: clipping (``clipping.clip``, of the full-batch gradient), SAM
(``sam.sharpness_pass``, a second pass at perturbed weights) and the non-finite check (``skip_nonfinite``); the
micro-batches are the plan's pieces (``Engine.groups``). ``StepRecipe.run`` is the one training loop; it calls the
engine's hooks, which hand the work to the engine's parts (placement, gradient synchronization, batch over ranks):

    step_context  before_step  step_seed  prepare  groups  step_loss  zero_grad
    gradient_pass (run_replicas -> run_piece per piece, step_result, reduce_gradients)
    [nonfinite]  [SAM: share_parameters, a second gradient_pass]  optimizer_step (clip_gradients)
    broadcast  (or skip_step)  after_step

The step's loss stays a tensor on the device: converting it to a Python number waits for the device to finish the
step (a host synchronization), which only a caller that needs the number now should pay. ``skip_nonfinite`` is such
a caller: before the optimizer step it reads whether the full-batch loss or gradient holds a ``nan`` or ``inf`` (one
synchronization), and skips the step if so. Both are the same whatever the split (a distributed engine all-reduces
them first), so every replica, micro-batch layout and rank takes the same decision.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import torch

from ...torchutils import NO_CONTEXT
from ..losses import ITEM_SHARES, PLAIN_SUM, StepLoss, normalized, weighting
from ..randomness import piece_random, piece_seed
from ..split import Piece
from .clipping import check_clip_value, check_max_norm
from .sam import Sam, sharpness_pass
from .tensors import BatchTensors, device_of, local_shard, move, set_mode, target_devices, to_device

if TYPE_CHECKING:
    from .base import Engine, StepResult

__all__ = ['BufferCopies', 'NonfiniteCheck', 'StepRecipe', 'gradient_pass', 'in_batch_order', 'optimized',
           'optimizer_step', 'run_piece', 'step_loss']

Groups = Mapping[int, Sequence[Piece]]


@dataclass(frozen=True)
class StepRecipe:
    """A training step's options (see the module docstring): ``max_norm`` and ``clip_value`` for clipping, ``sam``
    (``None``: off), ``skip_nonfinite``."""

    max_norm: float | None = None
    clip_value: float | Callable | None = None
    sam: Sam | None = None
    skip_nonfinite: bool = False

    @classmethod
    def of(cls, clip_grad_norm: Any = None, clip_grad_value: Any = None, sam: Sam | None = None,
           skip_nonfinite: bool = False) -> 'StepRecipe':
        """The recipe of ``train_step``'s arguments, checked (``clipping.check_max_norm``, ``check_clip_value``)."""
        return cls(check_max_norm(clip_grad_norm), check_clip_value(clip_grad_value), sam, skip_nonfinite)

    def run(self, engine: 'Engine', inputs: Any, targets: Any, loss_fn: Callable,
            optimizer: torch.optim.Optimizer, seed: int | None, return_outputs: bool) -> 'StepResult':
        """One optimizer step of ``engine`` on the whole batch, however its plan splits it."""
        with engine.step_context():
            form = normalized(loss_fn)              # None: a loss flowpipe cannot place (a mean over items)
            engine.before_step(inputs, targets, form)
            step_seed = engine.step_seed(seed)
            batch = engine.prepare(inputs, targets)
            groups = engine.groups(batch.size)      # {replica: its pieces}; a piece is one shard of one chunk
            step_loss = engine.step_loss(loss_fn, form, batch, groups)
            set_mode(engine.replicas, True)
            engine.zero_grad(optimizer)
            saved = engine.save_buffers() if self.skip_nonfinite else None

            def gradient_pass(keep_outputs: bool) -> 'StepResult':
                return engine.gradient_pass(batch, groups, step_loss, step_seed, keep_outputs)
            with engine.item_random(step_seed):    # dropout masks by item, when the plan says so
                result = gradient_pass(return_outputs)
                stepped = self.checked(engine, result.loss, optimizer)
                if stepped and self.sam is not None:    # the gradient at the perturbed weights replaces this one
                    stepped = sharpness_pass(engine, self.sam, optimizer, lambda: gradient_pass(False),
                                             self.skip_nonfinite)
            if stepped:
                engine.optimizer_step(optimizer, self.max_norm, self.clip_value)    # one optimizer step per batch
                engine.broadcast(tuple(groups))     # the new weights (and buffers) to the replicas
            else:
                engine.skip_step(optimizer, saved)
                result = replace(result, stepped=False)
            return engine.after_step(inputs, result, return_outputs)

    def checked(self, engine: 'Engine', loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the step may go on: not when ``skip_nonfinite`` finds a nan or an inf (``Engine.nonfinite``)."""
        return not (self.skip_nonfinite and engine.nonfinite(loss, optimizer))


def step_loss(loss_fn: Callable, form: Any, groups: Groups, batch_normalizer: Callable[[], Any]) -> StepLoss:
    """What each piece computes: ``loss_fn`` weighted by the piece's share of the items for a loss flowpipe cannot
    place (``form`` ``None``), a per-item mean or a whole batch in one piece; otherwise the piece's sum, as it is for
    a plain sum, else divided by the whole batch's normalizer (``batch_normalizer()``)."""
    rule = weighting(form)
    if rule == ITEM_SHARES or _one_piece(groups):
        return StepLoss(loss_fn)
    return StepLoss(form.sum, 1 if rule == PLAIN_SUM else batch_normalizer())


def _one_piece(groups: Groups) -> bool:
    """Whether the whole batch is one piece: its loss is the loss itself, whatever its normalization."""
    if len(groups) != 1:
        return False
    pieces = next(iter(groups.values()))
    return len(pieces) == 1 and pieces[0].weight == 1.0


def gradient_pass(engine: 'Engine', batch: BatchTensors, groups: Groups, loss: StepLoss, seed: int,
                  keep_outputs: bool) -> 'StepResult':
    """Forward and backward of every piece on its replica (``Engine.run_piece``), then the engine's
    ``reduce_gradients``; the full-batch loss (and outputs when ``keep_outputs``)."""
    def work(replica: int, pieces: Sequence[Piece]) -> list[tuple[torch.Tensor, Any]]:
        # each piece's loss is its share of the batch's (loss.weigh), so the gradients accumulated over all pieces
        # add up to the full-batch gradient
        return [engine.run_piece(replica, piece, batch, loss, keep_outputs, last=piece is pieces[-1], seed=seed)
                for piece in pieces]

    results = engine.run_replicas(groups, work)
    result = engine.step_result(in_batch_order(groups, results), keep_outputs)
    engine.reduce_gradients(tuple(groups))      # the full-batch gradient, on the primary
    return result


def in_batch_order(groups: Groups, results: Mapping[int, list]) -> list:
    """Per-replica results (one per piece, as ``groups`` lists them) merged into the order of the batch."""
    if len(results) == 1:
        return next(iter(results.values()))
    pairs = [(piece.start, value) for replica, values in results.items()
             for piece, value in zip(groups[replica], values)]
    pairs.sort(key=lambda pair: pair[0])
    return [value for _, value in pairs]


def run_piece(engine: 'Engine', replica: int, piece: Piece, batch: BatchTensors, loss_of: StepLoss,
              keep_outputs: bool, last: bool, seed: int) -> tuple[torch.Tensor, Any]:
    """``Engine.run_piece``: forward and backward of one piece on one replica, in the piece's random stream and the
    sync part's ``backward_sync``; a piece without items of a ``lockstep`` sync part only joins its collectives."""
    sync = engine.gradient_sync
    if not piece.size and sync.lockstep:
        return sync.join_empty(engine, replica, piece, batch, keep_outputs, last)
    forward, device, precision = engine.forwards[replica], engine.devices[replica], engine.precision
    start, calls = piece.start, NO_CONTEXT
    if engine._item_streams is not None:    # 'by_item': the piece's items, and the mode its random calls run in
        start += engine.item_offset
        calls = engine._item_streams.piece(replica, start, piece.size)
    with piece_random(device, piece_seed(seed, piece.chunk, start)), engine.backward_sync(last), calls:
        with precision.autocast(device):
            outputs = forward(*[move(t, device, batch.dtype, piece, engine.memory_format) for t in batch.inputs])
            out_device = device_of(outputs, device)
            places = target_devices(outputs, len(batch.targets), out_device)
            loss = loss_of.fn(outputs, *[move(t, place, batch.dtype, piece)
                                         for t, place in zip(batch.targets, places)])
        weighted = loss_of.weigh(precision.convert_loss(loss), piece)
        factor = engine.backward_factor
        precision.scale(weighted if factor == 1.0 else weighted * factor).backward()
    return weighted.detach(), to_device(outputs, out_device) if keep_outputs else None


def optimizer_step(engine: 'Engine', optimizer: torch.optim.Optimizer, max_norm: float | None,
                   clip_value: float | Callable | None) -> None:
    """``Engine.optimizer_step``: unscale and clip the full-batch gradient (when asked to, in the engine's
    ``clip_gradients``), then step; on an error (or Ctrl-C) the precision forgets the step."""
    try:
        if max_norm is not None or clip_value is not None:     # the full-batch gradient: whatever the split
            engine.precision.unscale(optimizer)
            engine.clip_gradients(optimized(optimizer), norm=max_norm, value=clip_value)
        engine.precision.step(optimizer)
    except BaseException:
        engine.precision.discard_step(optimizer)
        raise


def optimized(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's parameters, group by group."""
    return [param for group in optimizer.param_groups for param in group['params']]


class NonfiniteCheck:
    """Whether a loss or the gradients of an optimizer's parameters hold a nan or an inf, as one-item float32 flags,
    one per device (kept between steps), set by torch's fused check: not read on the host."""

    def __init__(self) -> None:
        self._flags: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def flag(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, with_grads: bool) -> torch.Tensor:
        """Non-zero where ``loss`` (or, ``with_grads``, a gradient's local shard) is not finite, on the loss's
        device."""
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {
            (loss.device, loss.dtype): [loss.detach().reshape(1)]}
        if with_grads:
            for param in optimized(optimizer):
                grad = param.grad
                if grad is not None:
                    grad = grad._values() if grad.is_sparse else local_shard(grad)   # the fused check: dense, local
                    groups.setdefault((grad.device, grad.dtype), []).append(grad)
        flags = self._flags
        for device, _ in groups:
            if device not in flags:
                # float32 whatever the default dtype: torch's fused check takes float32 flags only
                flags[device] = (torch.zeros(1, dtype=torch.float32, device=device),
                                 torch.ones(1, dtype=torch.float32, device=device))
            flags[device][0].zero_()
        for (device, _), tensors in groups.items():
            found, one = flags[device]
            # multiplies by one (exact) and sets ``found`` where a value is not finite: one fused pass per group
            torch._amp_foreach_non_finite_check_and_unscale_(tensors, found, one)
        found = [flags[device][0].to(loss.device) for device in {device for device, _ in groups}]
        return found[0] if len(found) == 1 else torch.cat(found).amax(0, keepdim=True)


class BufferCopies:
    """Copies of a module's buffers (BatchNorm running statistics), taken before a step's forwards change them,
    into storage kept between steps."""

    def __init__(self) -> None:
        self._copies: list[torch.Tensor] | None = None

    def save(self, buffers: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """``(buffers, their copies)``; ``None`` for no buffers."""
        if not buffers:
            return None
        copies = self._copies
        if copies is None or [(c.shape, c.dtype, c.device) for c in copies] != [
                (b.shape, b.dtype, b.device) for b in buffers]:
            copies = self._copies = [buffer.detach().clone() for buffer in buffers]
        else:
            torch._foreach_copy_(copies, [buffer.detach() for buffer in buffers])
        return buffers, copies
