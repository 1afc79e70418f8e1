"""The one training loop and prediction loop of every engine, and the hooks engines override.

An engine owns the placement of one ``nn.Module`` (its replicas, their devices) and runs training and prediction
steps on sequences of batch-first tensors; it knows nothing of pipelines, batches or configs. The loop lives in
:meth:`Engine.train_step`. A subclass places the module in ``__init__`` and overrides the hooks its placement
needs (each is a no-op or the one-replica case here):

- ``step_context()``, ``before_step(inputs, targets, form)``, ``step_seed(seed)``, ``after_step(inputs, result,
  return_outputs)``: around the step (a distributed engine's exchange of item counts and loss normalizers, named
  collectives);
- ``batch_normalizer(form, batch)``: the loss's normalizer of the whole batch, which every piece's sum is divided by
  (``flowpipe.parallel.losses``; a distributed engine's is the ranks' sum);
- ``prepare(inputs, targets)``: check the step's tensors;
- ``groups(batch_size)``: the pieces each replica computes, with their loss weights;
- ``run_replicas(groups, work)``: how the replicas run their pieces (here one after another, in this thread);
- ``zero_grad(optimizer)``: clear the gradients before a batch;
- ``backward_sync(last)``: the context of each piece's forward and backward, ``last`` for a replica's last piece;
- ``reduce_gradients(active)``: gather the full-batch gradient onto the primary;
- ``broadcast(active)``: send the primary's new state to the replicas after the optimizer step;
- ``step_result(ordered, keep_outputs)``: the loss (a tensor, left on the device) and outputs the step returns;
- ``clip_gradients(params, norm, value)``: clip the full-batch gradient (``clipping.clip``);
- ``share_parameters()``: SAM's perturbed weights given to the replicas (``engines.sam``);
- ``state_dict()`` / ``load_state_dict(state)``, ``optimizer_state_dict(optimizer)`` /
  ``load_optimizer_state_dict(optimizer, state)``: the state saved in model files, as one process holds it
  (collectives every rank calls when ``collective_state``: a sharded engine gathers it on rank 0);
- ``sharded_state_dict(optimizer)`` / ``load_sharded_state_dict(optimizer, state)``: this rank's part of the state,
  for a checkpoint written one shard per rank (``Checkpoint(sharded=True)``);
- ``close()``: release threads or process groups.

Every piece goes through :meth:`Engine.run_piece` (training) or :meth:`Engine.predict_piece` (prediction).

The step's loss stays a tensor on the device: converting it to a Python number waits for the device to finish
the step (a host synchronization), which only a caller that needs the number now should pay. ``skip_nonfinite``
is such a caller: before the optimizer step it reads whether the full-batch loss or gradient holds a ``nan`` or
``inf`` (one synchronization), and skips the step if so. Both are the same whatever the split (a distributed
engine all-reduces them first), so every replica, micro-batch layout and rank takes the same decision.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from ...data.shards import NO_RUN, RunContext
from ...torchutils import NO_CONTEXT
from ..item_random import BY_ITEM, ItemStreams
from ..losses import ITEM_SHARES, PLAIN_SUM, StepLoss, normalized, normalizer_value, weighting
from ..plan import DevicePlan
from ..precision import Precision, make_precision
from ..randomness import draw_step_seed, piece_random, piece_seed
from ..speed import compiled, resolve_memory_format, torch_memory_format
from ..split import Piece
from .clipping import check_clip_value, check_max_norm, clip
from .cuda import device_context
from .sam import Sam, sharpness_pass
from .tensors import (BatchTensors, concat, device_of, first_floating, local_shard, move, prepare_batch, set_mode,
                      target_devices, to_device)

__all__ = ['Engine', 'StepResult']

Tensors = Sequence[torch.Tensor]
Groups = Mapping[int, Sequence[Piece]]


@dataclass(frozen=True)
class StepResult:
    """The outcome of one training step.

    Attributes:
        loss: the full-batch loss, a 0-dim tensor left on the device (``float(result.loss)`` reads it).
        outputs: when asked, the outputs of the batch in batch order.
        stepped: ``False`` when the engine's ``skip_nonfinite`` skipped the optimizer step.
    """

    loss: torch.Tensor
    outputs: Any = None
    stepped: bool = True


def in_batch_order(groups: Groups, results: Mapping[int, list]) -> list:
    """Per-replica results (one per piece, as ``groups`` lists them) merged into the order of the batch."""
    if len(results) == 1:
        return next(iter(results.values()))
    pairs = [(piece.start, value) for replica, values in results.items()
             for piece, value in zip(groups[replica], values)]
    pairs.sort(key=lambda pair: pair[0])
    return [value for _, value in pairs]


class Engine:
    """Runs one module's training and prediction steps as ``plan`` says (see the module docstring for hooks).

    Args:
        plan: the frozen plan.
        replicas: the modules pieces run on, the primary first (it holds the optimizer's parameters).
        devices: the device each replica's inputs are moved to.
        precision: autocast and loss scaling; ``None`` for ``make_precision(plan)``.

    Attributes:
        memory_format: the layout replicas' weights were converted to and 4-D inputs take at every step
            (``torch.channels_last``), or ``None``: as given.
        forwards: what each replica's pieces are fed to: the replica, or its ``torch.compile`` wrapper.
        skip_nonfinite: when the full-batch loss or gradient of a training step holds a ``nan`` or ``inf``, leave
            the model as it was before the batch (no optimizer step, gradients cleared, buffers such as
            BatchNorm statistics restored) and return ``stepped=False``; costs one host synchronization per
            step. ``False`` here; ``TorchModel`` sets it from its config's ``nonfinite_loss``.
        backward_factor: what each weighted piece loss is multiplied by for its backward only (the returned
            losses keep their weights): 1 here; a distributed engine whose all-reduce averages gradients over
            the ranks makes it the number of ranks, so the averaged gradients are the weighted sums.
        collective_state: whether ``state_dict()`` and ``optimizer_state_dict()`` are collectives that every rank
            calls (a sharded engine gathers the whole state on rank 0, the other ranks get ``{}``): ``False`` here.
        item_offset: the index in the global batch of the first item this process computes: 0 here; a distributed
            engine sets it at every step. Under ``'randomness': 'by_item'`` dropout masks are keyed by global items.
    """

    skip_nonfinite: bool = False
    backward_factor: float = 1.0
    collective_state: bool = False

    def __init__(self, plan: DevicePlan, replicas: Sequence[nn.Module], devices: Sequence[torch.device],
                 precision: Precision | None = None):
        self.plan = plan
        self.replicas = list(replicas)
        self.devices = list(devices)
        self.precision = make_precision(plan) if precision is None else precision
        self.memory_format = torch_memory_format(resolve_memory_format(plan, self.replicas[0]))
        if self.memory_format is not None:
            for replica in self.replicas:       # in place: parameters stay the same objects
                replica.to(memory_format=self.memory_format)
        self.forwards = [compiled(replica, plan.compile) for replica in self.replicas]
        self._groups: dict[int, dict[int, tuple[Piece, ...]]] = {}
        self._dtype_source: torch.Tensor | None = None
        self._buffer_copies: list[torch.Tensor] | None = None
        self._nonfinite_flags: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._item_streams: ItemStreams | None = None
        self.item_offset = 0
        self.run = NO_RUN

    @property
    def module(self) -> nn.Module:
        """The primary replica: it holds the truth (``state_dict``, the optimizer's parameters)."""
        return self.replicas[0]

    def parameters(self) -> Iterator[nn.Parameter]:
        """The primary's parameters: build the optimizer on these."""
        return self.module.parameters()

    # state for saving: a sharded engine gathers the full state here

    def state_dict(self) -> dict:
        """The network's ``state_dict``, keys as in one process (the primary module's here)."""
        return self.module.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load a ``state_dict`` (keys as in one process) into the network; ``sync()`` then copies it to the
        replicas."""
        self.module.load_state_dict(state)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        """The ``state_dict`` of ``optimizer`` (built on ``parameters()``), as one process holds it."""
        return optimizer.state_dict()

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        """Load an ``optimizer_state_dict`` into ``optimizer``."""
        optimizer.load_state_dict(state)

    def sharded_state_dict(self, optimizer: torch.optim.Optimizer, with_optimizer: bool | None = None) -> dict:
        """This rank's part of the network's and optimizer's state for ``torch.distributed.checkpoint``
        (``sharded_state.sharded_state``): a sharded module's slices, a replicated one's whole tensors (written
        once)."""
        from ..sharded_state import sharded_state
        return sharded_state(self.module, optimizer, with_optimizer)

    def load_sharded_state_dict(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        """Put a ``sharded_state_dict`` read back by ``torch.distributed.checkpoint`` into the network and
        optimizer; ``sync()`` then copies it to the replicas."""
        from ..sharded_state import load_sharded_state
        load_sharded_state(self.module, optimizer, state)

    def compute_dtype(self) -> torch.dtype | None:
        """The dtype floating inputs and targets are cast to: the primary's first floating parameter's.

        The parameter is found once (a search costs about as much as a small layer's forward) and its dtype read
        at every step, so a later ``module.double()`` is followed.
        """
        if self._dtype_source is None:
            self._dtype_source = first_floating(self.module)
            if self._dtype_source is None:
                return None
        return self._dtype_source.dtype

    # the loops

    def train_step(self, inputs: Tensors, targets: Tensors, loss_fn: Callable, optimizer: torch.optim.Optimizer,
                   *, return_outputs: bool = False, clip_grad_norm: float | None = None,
                   clip_grad_value: float | Callable | None = None, seed: int | None = None,
                   sam: Sam | None = None, run: RunContext | None = None) -> StepResult:
        """One optimizer step on the whole batch, however the plan splits it.

        The step runs in ``step_context()``, from ``before_step`` to ``after_step``; the full-batch gradient is
        clipped in ``clip_gradients`` and stepped in ``optimizer_step``.

        Args:
            inputs: batch-first tensors fed to ``module(*inputs)``; floating ones are cast to the parameters' dtype.
            targets: batch-first tensors passed as ``loss_fn(outputs, *targets)``; integer ones stay integer.
            loss_fn: returns the loss of the items it is given: a mean over the items, or a loss that declares
                its normalizer (``losses.NormalizedLoss``, torch's losses): each piece then adds its sum divided by
                the whole batch's normalizer, so the step is exact whatever the loss (``docs/parallel.md``).
            optimizer: built on ``engine.parameters()``.
            return_outputs: also return the outputs of the whole batch, in order, on the primary device.
            clip_grad_norm: clip the full-batch gradient of the optimizer's parameters to this total 2-norm.
            clip_grad_value: clamp each entry of the full-batch gradient to ``[-value, value]``, or apply a callable
                ``grad -> grad`` to each parameter's full-batch gradient; before ``clip_grad_norm``.
            seed: the step seed each piece's random stream derives from (see ``flowpipe.parallel.randomness``);
                ``None`` draws one from torch's global generator.
            sam: sharpness-aware minimization (``engines.sam.make_sam``): a second pass at weights perturbed along
                the first pass's full-batch gradient gives the gradient the optimizer steps with; ``None``: off.
            run: where the step lies in its run (``data.shards.RunContext``: the shard of the global batch, which a
                distributed engine checks every rank is on); ``None``: a whole batch outside a run.
        """
        self.run = NO_RUN if run is None else run
        max_norm = check_max_norm(clip_grad_norm)
        clip_value = check_clip_value(clip_grad_value)
        with self.step_context():
            form = normalized(loss_fn)              # None: a loss flowpipe cannot place (a mean over items)
            self.before_step(inputs, targets, form)
            step_seed = self.step_seed(seed)
            batch = self.prepare(inputs, targets)
            groups = self.groups(batch.size)        # {replica: its pieces}; a piece is one shard of one chunk
            step_loss = self.step_loss(loss_fn, form, batch, groups)
            set_mode(self.replicas, True)
            self.zero_grad(optimizer)
            skip_nonfinite = self.skip_nonfinite
            saved = self.save_buffers() if skip_nonfinite else None
            with self.item_random(step_seed):      # dropout masks by item, when the plan says so
                result = self.gradient_pass(batch, groups, step_loss, step_seed, return_outputs)
                stepped = not (skip_nonfinite and self.nonfinite(result.loss, optimizer))
                if stepped and sam is not None:         # the gradient at the perturbed weights replaces this one
                    stepped = sharpness_pass(self, sam, optimizer, lambda: self.gradient_pass(
                        batch, groups, step_loss, step_seed, False), skip_nonfinite)
            if stepped:
                self.optimizer_step(optimizer, max_norm, clip_value)     # one optimizer step per batch
                self.broadcast(tuple(groups))       # the new weights (and buffers) to the replicas
            else:
                self.skip_step(optimizer, saved)
                result = replace(result, stepped=False)
            return self.after_step(inputs, result, return_outputs)

    def step_loss(self, loss_fn: Callable, form: Any, batch: BatchTensors, groups: Groups) -> StepLoss:
        """What each piece computes: ``loss_fn`` weighted by the piece's share of the items for a loss flowpipe
        cannot place (``form`` ``None``), a per-item mean or a whole batch in one piece; otherwise the piece's sum,
        as it is for a plain sum, else divided by the whole batch's normalizer (``batch_normalizer``)."""
        rule = weighting(form)
        if rule == ITEM_SHARES or _one_piece(groups):
            return StepLoss(loss_fn)
        return StepLoss(form.sum, 1 if rule == PLAIN_SUM else self.batch_normalizer(form, batch))

    def batch_normalizer(self, form: Any, batch: BatchTensors) -> float | torch.Tensor:
        """The loss's normalizer of the whole batch (``losses.normalizer_value``), counted before the split; a
        distributed engine's is the sum of the ranks', exchanged with their item counts."""
        return normalizer_value(form.normalizer(*batch.targets))

    def gradient_pass(self, batch: BatchTensors, groups: Groups, step_loss: StepLoss, seed: int,
                      keep_outputs: bool) -> StepResult:
        """Forward and backward of every piece, then ``reduce_gradients``: the full-batch gradient on the primary;
        returns the full-batch loss (and outputs when ``keep_outputs``)."""
        def work(replica: int, pieces: Sequence[Piece]) -> list[tuple[torch.Tensor, Any]]:
            # each piece's loss is its share of the batch's (step_loss.weigh), so the gradients accumulated over
            # all pieces add up to the full-batch gradient
            return [self.run_piece(replica, piece, batch, step_loss, keep_outputs, last=piece is pieces[-1],
                                   seed=seed) for piece in pieces]

        results = self.run_replicas(groups, work)
        result = self.step_result(in_batch_order(groups, results), keep_outputs)
        self.reduce_gradients(tuple(groups))        # the full-batch gradient, on the primary
        return result

    def optimizer_step(self, optimizer: torch.optim.Optimizer, max_norm: float | None,
                       clip_value: float | Callable | None) -> None:
        """Unscale and clip the full-batch gradient (when asked to), then take the one optimizer step of the batch;
        on an error (or Ctrl-C) the precision forgets the step, so the next one starts afresh."""
        try:
            if max_norm is not None or clip_value is not None:     # the full-batch gradient: whatever the split
                self.precision.unscale(optimizer)
                self.clip_gradients(_optimized(optimizer), norm=max_norm, value=clip_value)
            self.precision.step(optimizer)
        except BaseException:
            self.precision.discard_step(optimizer)
            raise

    def nonfinite(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the full-batch ``loss`` or the full-batch gradient of the optimizer's parameters holds a nan or
        an inf (an inf input can give a finite loss and an inf gradient); one host synchronization.

        Under a gradient scaler only the loss is read: the scaler skips the steps of non-finite (scaled)
        gradients itself, and lowers its scale, which a step skipped here would not.
        """
        return bool(self.nonfinite_flag(loss, optimizer))

    def nonfinite_flag(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> torch.Tensor:
        """``nonfinite`` as a one-item tensor on the loss's device (non-zero: found), not read on the host; a
        sharded engine reads its gradients' local shards and combines the ranks' flags."""
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {
            (loss.device, loss.dtype): [loss.detach().reshape(1)]}
        if self.precision.scaler is None:
            for param in _optimized(optimizer):
                grad = param.grad
                if grad is not None:
                    grad = grad._values() if grad.is_sparse else local_shard(grad)   # the fused check: dense, local
                    groups.setdefault((grad.device, grad.dtype), []).append(grad)
        flags = self._nonfinite_flags
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

    def save_buffers(self) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """The primary's buffers and copies of their values, before a step's forwards change them (BatchNorm
        running statistics); ``None`` for a module without buffers."""
        buffers = list(self.module.buffers())
        if not buffers:
            return None
        copies = self._buffer_copies
        if copies is None or [(c.shape, c.dtype, c.device) for c in copies] != [
                (b.shape, b.dtype, b.device) for b in buffers]:
            copies = self._buffer_copies = [buffer.detach().clone() for buffer in buffers]
        else:
            torch._foreach_copy_(copies, [buffer.detach() for buffer in buffers])
        return buffers, copies

    @torch.no_grad()
    def skip_step(self, optimizer: torch.optim.Optimizer,
                  saved: tuple[list[torch.Tensor], list[torch.Tensor]] | None) -> None:
        """Leave the model as before the batch: clear the gradients, restore the primary's buffers from
        ``saved`` (``save_buffers``) and copy the primary's state to the replicas."""
        self.zero_grad(optimizer)
        if saved is not None:
            torch._foreach_copy_(*saved)
        self.sync()

    def run_piece(self, replica: int, piece: Piece, batch: BatchTensors, step_loss: StepLoss, keep_outputs: bool,
                  last: bool, seed: int) -> tuple[torch.Tensor, Any]:
        """Forward and backward of one piece on one replica; returns (its share of the batch's loss, detached
        outputs or None).

        The piece draws its random numbers (dropout) from its own generator state, derived from the step ``seed``;
        under ``'randomness': 'by_item'`` its dropout modules draw by item, its first item being item
        ``item_offset + piece.start`` of the global batch.
        """
        forward, device = self.forwards[replica], self.devices[replica]
        start = piece.start
        if self._item_streams is not None:
            start += self.item_offset
            self._item_streams.piece(replica, start, piece.size)
        with piece_random(device, piece_seed(seed, piece.chunk, start)), self.backward_sync(last):
            with self.precision.autocast(device):
                outputs = forward(*[move(t, device, batch.dtype, piece, self.memory_format) for t in batch.inputs])
                out_device = device_of(outputs, device)
                places = target_devices(outputs, len(batch.targets), out_device)
                loss = step_loss.fn(outputs, *[move(t, place, batch.dtype, piece)
                                               for t, place in zip(batch.targets, places)])
            weighted = step_loss.weigh(self.precision.convert_loss(loss), piece)
            factor = self.backward_factor
            self.precision.scale(weighted if factor == 1.0 else weighted * factor).backward()
        return weighted.detach(), to_device(outputs, out_device) if keep_outputs else None

    def step_result(self, ordered: list[tuple[torch.Tensor, Any]], keep_outputs: bool) -> StepResult:
        """The full-batch loss (the sum of the weighted piece losses) and the outputs, on the primary device."""
        primary = self.devices[0]
        total = ordered[0][0] if len(ordered) == 1 else torch.stack([loss.to(primary) for loss, _ in ordered]).sum()
        outputs = concat([to_device(out, primary) for _, out in ordered]) if keep_outputs else None
        return StepResult(total, outputs)

    def batch_mean(self, mean: float, count: int, run: RunContext | None = None) -> float:
        """The mean over the whole batch of a value averaged over this process's ``count`` items (``mean``):
        ``mean`` itself here, NaN for no items; a distributed engine combines the ranks' shards (``run``: where
        the batch lies in its run, as in ``train_step``)."""
        return mean if count else math.nan

    def predicted_loss(self, loss_fn: Callable, outputs: Any, targets: Sequence[torch.Tensor],
                       run: RunContext | None = None) -> float:
        """The loss of a predicted batch (``targets`` on the outputs' device): ``loss_fn`` on the whole batch here,
        NaN for no items; a distributed engine's is the global batch's, from every rank's shard (``run``: where the
        batch lies in its run, as in ``train_step``)."""
        if not _items(targets):
            return math.nan
        with torch.no_grad():
            return float(loss_fn(outputs, *targets))

    def predict(self, inputs: Tensors, run: RunContext | None = None) -> Any:
        """Outputs for a batch in evaluation mode, without gradients, in batch order, on the primary device
        (``run``: where the batch lies in its run, as in ``train_step``)."""
        self.run = NO_RUN if run is None else run
        batch = self.prepare(inputs, ())
        groups = self.groups(batch.size)
        set_mode(self.replicas, False)
        results = self.run_replicas(groups, lambda replica, pieces: [
            self.predict_piece(replica, piece, batch) for piece in pieces])
        return concat([to_device(out, self.devices[0]) for out in in_batch_order(groups, results)])

    def predict_piece(self, replica: int, piece: Piece, batch: BatchTensors) -> Any:
        """The outputs of one piece on one replica, without gradients."""
        forward, device = self.forwards[replica], self.devices[replica]
        with torch.no_grad(), self.precision.autocast(device):      # both thread-local: entered per piece
            return forward(*[move(t, device, batch.dtype, piece, self.memory_format) for t in batch.inputs])

    def prepare(self, inputs: Tensors, targets: Tensors) -> BatchTensors:
        """The checked batch of a step (see ``tensors.prepare_batch``); with ``plan.pin_memory`` its host tensors
        pinned, once per batch, so that every piece's copy to a GPU is non-blocking; with
        ``memory_format='channels_last'`` given explicitly, an error when no input is 4-D (it cannot apply)."""
        batch = prepare_batch(inputs, targets, self.compute_dtype())
        if self.plan.pin_memory:
            batch = batch._replace(inputs=[self.pin(t) for t in batch.inputs],
                                   targets=[self.pin(t) for t in batch.targets])
        if self.plan.memory_format == 'channels_last' and not any(t.dim() == 4 for t in batch.inputs):
            shapes = [tuple(t.shape) for t in batch.inputs]
            raise ValueError(f"Expected a 4-D (N, C, H, W) input for memory_format='channels_last'. Received: "
                             f"inputs of shapes {shapes}. Use memory_format='auto' or None for this model.")
        return batch

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor in pinned memory (its copies to a GPU then run asynchronously); others as they are."""
        if tensor.device.type != 'cpu' or tensor.is_pinned():
            return tensor
        return tensor.pin_memory()

    def groups(self, batch_size: int) -> dict[int, tuple[Piece, ...]]:
        """The plan's pieces of a batch by replica (replicas with pieces, ascending), computed once per size."""
        groups = self._groups.get(batch_size)
        if groups is None:
            groups = {}
            for piece in self.plan.pieces(batch_size):
                groups.setdefault(piece.replica, []).append(piece)
            groups = self._groups[batch_size] = {replica: tuple(pieces) for replica, pieces in sorted(groups.items())}
        return groups

    def item_random(self, seed: int) -> contextlib.AbstractContextManager:
        """The context of a step's passes: under ``'randomness': 'by_item'`` every replica's dropout modules draw
        their masks by item, keyed by ``seed`` (``item_random.ItemStreams``); a no-op under ``'torch'``."""
        if self.plan.randomness != BY_ITEM:
            return NO_CONTEXT
        if self._item_streams is None:
            self._item_streams = ItemStreams([self.module, *self.replicas[1:]])
        return self._item_streams.step(seed)

    # hooks

    def step_context(self) -> contextlib.AbstractContextManager:
        """The context a training step runs in, from ``before_step`` to ``after_step``: a no-op here; a
        distributed engine names the step's collectives in it, for the error of one that times out."""
        return NO_CONTEXT

    def before_step(self, inputs: Tensors, targets: Tensors, form: Any = None) -> None:
        """Called first in a training step, with its raw inputs and targets and the loss's normalized form
        (``losses.normalized``): a no-op here; a distributed engine exchanges the ranks' item counts (the global
        batch size, idle ranks) and loss normalizers."""

    def step_seed(self, seed: int | None) -> int:
        """The seed the step's pieces derive their random streams from: ``seed``, or one drawn from torch's
        global generator; a distributed engine mixes in its shard's place in the global batch."""
        return draw_step_seed() if seed is None else int(seed)

    def after_step(self, inputs: Tensors, result: StepResult, return_outputs: bool) -> StepResult:
        """The result the step returns, stepped or skipped: ``result`` here; a distributed engine gives a rank
        with no items empty outputs of the right shape."""
        return result

    def clip_gradients(self, params: list[torch.Tensor], norm: float | None = None,
                       value: float | Callable | None = None) -> None:
        """Clip the full-batch gradients of ``params`` in place (``clipping.clip``: by ``value``, then to the total
        2-norm ``norm``). The step calls it once, after ``reduce_gradients`` and the precision's unscaling, when
        either is set; torch's clipping takes a sharded engine's ``DTensor`` gradients whole (the global norm)."""
        clip(params, norm, value)

    def share_parameters(self) -> None:
        """Give the primary's parameters (SAM's perturbed weights) to the replicas for the step's second pass: a
        no-op where every replica moved its own (one module, or each rank from the same all-reduced gradient)."""

    def run_replicas(self, groups: Groups, work: Callable[[int, Sequence[Piece]], list]) -> dict[int, list]:
        """``{replica: work(replica, its pieces)}`` for every replica in ``groups``: here in turn, in this thread,
        with each replica's device current on a GPU (user code allocating on ``'cuda'`` lands there)."""
        results = {}
        for replica, pieces in groups.items():
            with device_context(self.devices[replica]):
                results[replica] = work(replica, pieces)
        return results

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Clear the gradients before a batch (``set_to_none``)."""
        optimizer.zero_grad(set_to_none=True)

    def backward_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """The context of one piece's forward and backward; ``last``: the replica's last piece of the batch."""
        return NO_CONTEXT

    def reduce_gradients(self, active: tuple[int, ...]) -> None:
        """Make the primary's ``.grad`` the full-batch gradient; ``active``: the replicas that ran pieces."""

    def broadcast(self, active: tuple[int, ...]) -> None:
        """Copy the primary's state to the other replicas after the step; ``active`` as in ``reduce_gradients``."""

    def sync(self) -> None:
        """Copy the primary's parameters and buffers to the replicas (after loading weights)."""
        self.broadcast((0,))

    def close(self) -> None:
        """Release worker threads; the engine must not be used afterwards."""

    def __enter__(self) -> 'Engine':
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def describe(self, batch_size: int | None = None, loss: Any = None) -> str:
        """Readable placement for ``batch_size``: the plan's description (with how ``loss`` is weighted, when
        given) and what only the built engine knows (the sizes of the module's parameters and buffers)."""
        return self.plan.describe(batch_size, parameter_bytes=_bytes(self.module.parameters()),
                                  buffer_bytes=_bytes(self.module.buffers()), loss=loss)

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.describe()})'


def _one_piece(groups: Groups) -> bool:
    """Whether the whole batch is one piece: its loss is the loss itself, whatever its normalization."""
    if len(groups) != 1:
        return False
    pieces = next(iter(groups.values()))
    return len(pieces) == 1 and pieces[0].weight == 1.0


def _items(targets: Sequence[torch.Tensor]) -> int:
    first = targets[0]
    return int(first.shape[0]) if first.dim() else 1


def _bytes(tensors: Any) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def _optimized(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [param for group in optimizer.param_groups for param in group['params']]
