"""The engine: one module's training and prediction steps, composed from parts.

An engine runs training and prediction steps on sequences of batch-first tensors; it knows nothing of pipelines,
batches or configs. It is built from parts with small interfaces, each kind one class:

- a **placement** (``placement``: ``OneDevice``, ``Replicas``, ``ModelParallel``; a pipeline's
  ``stage_placement.StagePlacement``): where the module and its copies live and how the copies run their pieces;
- a **gradient synchronization** (``sync.GradientSync`` (none), ``sync.ReplicaSum``, ``ddp.DdpAllReduce``,
  ``fsdp.FsdpReduceScatter``): how the pieces' gradients become the full-batch gradient and the new state reaches the
  copies, and how the state is saved;
- a **batch part** (``ranks.OneProcess``, ``ranks.DataRanks``): how the batch lies over processes: the pieces
  and their loss weights, the global loss, predictions;
- the **step recipe** (``step.StepRecipe``: micro-batches, SAM, the non-finite check, clipping), built at every
  ``train_step`` from its arguments, runs the one training loop through the engine's hooks.

The hooks (``zero_grad``, ``backward_sync``, ``reduce_gradients``, ``groups``, ``step_result``, ...) are the
engine's methods that hand the work to its parts: a new kind of engine is new parts, not new hooks.

What the engine needs to know of the run a step lies in (the shard of the global batch, how whole batches are given
out) comes in the call: ``run=`` (``data.shards.RunContext``), which the model passes; the engine reads no context
variable.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from ...data.shards import NO_RUN, RunContext
from ...torchutils import NO_CONTEXT
from ..item_random import BY_ITEM, ItemStreams, qualified
from ..losses import StepLoss
from ..plan import DevicePlan
from ..precision import Precision, make_precision
from ..randomness import draw_step_seed
from ..speed import compiled, resolve_memory_format, torch_memory_format
from ..split import Piece
from .clipping import clip
from .placement import Placement
from .ranks import OneProcess
from .sam import Sam
from . import step as steps
from .step import BufferCopies, NonfiniteCheck, StepRecipe
from .sync import GradientSync
from .tensors import BatchTensors, first_floating, move, planned_batch, prepare_batch

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


class Engine:
    """Runs one module's training and prediction steps as ``plan`` says, from its parts (see the module docstring).

    Args:
        plan: the frozen plan.
        placement: where the module and its copies live (``placement.Placement``).
        sync: the gradient synchronization (``sync.GradientSync``); ``None``: none (one module).
        precision: autocast and loss scaling; ``None`` for ``make_precision(plan)``.
        ranks: the batch part (``ranks.DataRanks`` in a distributed job); ``None``: ``ranks.OneProcess``.

    Attributes:
        replicas: the modules the pieces run through (the sync part's wrappers of the placement's replicas);
            ``devices``: the device each replica's inputs are moved to. ``placement``, ``gradient_sync``,
            ``ranks``: the parts.
        memory_format: the layout replicas' weights were converted to and 4-D inputs take at every step
            (``torch.channels_last``), or ``None``: as given.
        forwards: what each replica's pieces are fed to: the replica, or its ``torch.compile`` wrapper.
        skip_nonfinite: leave the model as before the batch and return ``stepped=False`` when a step's full-batch
            loss or gradient holds a ``nan`` or ``inf`` (``step.StepRecipe``); ``TorchModel`` sets it.
        item_offset: the global batch's index of this process's first item (dropout masks ``'by_item'`` use it).
        run: where the current call's batch lies in its run (``data.shards.RunContext``), as the call gave it.
    """

    skip_nonfinite: bool = False

    def __init__(self, plan: DevicePlan, placement: Placement, sync: GradientSync | None = None,
                 precision: Precision | None = None, ranks: OneProcess | None = None):
        self.plan, self.placement = plan, placement
        self.gradient_sync = GradientSync() if sync is None else sync
        self.ranks = OneProcess() if ranks is None else ranks
        self.devices = placement.devices
        self.precision = make_precision(plan) if precision is None else precision
        self.memory_format = torch_memory_format(resolve_memory_format(plan, placement.module))
        if self.memory_format is not None:
            for replica in placement.replicas:      # in place: parameters stay the same objects
                replica.to(memory_format=self.memory_format)
        self.replicas = self.gradient_sync.wrap(placement, plan)
        self.forwards = [compiled(replica, plan.compile) for replica in self.replicas]
        self._dtype_source: torch.Tensor | None = None
        self._buffer_copies, self._nonfinite = BufferCopies(), NonfiniteCheck()
        self._item_streams: ItemStreams | None = None
        self.item_offset = 0
        self.run = NO_RUN

    @property
    def module(self) -> nn.Module:
        """The primary replica, unwrapped: it holds the truth (``state_dict``, the optimizer's parameters)."""
        return self.placement.module

    @property
    def backward_factor(self) -> float:
        """What each weighted piece loss is multiplied by for its backward only (the sync part's)."""
        return self.gradient_sync.backward_factor

    @property
    def collective_state(self) -> bool:
        """Whether the ``state_dict`` methods are collectives every rank calls (the sync part's)."""
        return self.gradient_sync.collective_state

    def parameters(self) -> Iterator[nn.Parameter]:
        """The primary's parameters: build the optimizer on these."""
        return self.module.parameters()

    # state for saving (a sharded synchronization gathers the full state)
    def state_dict(self) -> dict:
        """The network's ``state_dict``, keys as in one process."""
        return self.gradient_sync.state_dict(self.module)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load a ``state_dict`` (keys as in one process); ``sync()`` then copies it to the replicas."""
        self.gradient_sync.load_state_dict(self.module, state)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        """The ``state_dict`` of ``optimizer`` (built on ``parameters()``), as one process holds it."""
        return self.gradient_sync.optimizer_state_dict(self.module, optimizer)

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        """Load an ``optimizer_state_dict`` into ``optimizer``."""
        self.gradient_sync.load_optimizer_state_dict(self.module, optimizer, state)

    def sharded_state_dict(self, optimizer: torch.optim.Optimizer, with_optimizer: bool | None = None) -> dict:
        """This rank's part of the network's and optimizer's state for ``torch.distributed.checkpoint``
        (``sharded_state.sharded_state``): a sharded module's slices, a replicated one's whole tensors."""
        from ..sharded_state import sharded_state
        return sharded_state(self.module, optimizer, with_optimizer)

    def load_sharded_state_dict(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        """Put a ``sharded_state_dict`` read back by ``torch.distributed.checkpoint`` into the network and
        optimizer; ``sync()`` then copies it to the replicas."""
        from ..sharded_state import load_sharded_state
        load_sharded_state(self.module, optimizer, state)

    def compute_dtype(self) -> torch.dtype | None:
        """The dtype floating inputs and targets are cast to: the primary's first floating parameter's, found once
        and read at every step (a later ``module.double()`` is followed)."""
        if self._dtype_source is None:
            self._dtype_source = first_floating(self.module)
            if self._dtype_source is None:
                return None
        return self._dtype_source.dtype

    # the step (step.StepRecipe runs it through the hooks below)

    def train_step(self, inputs: Tensors, targets: Tensors, loss_fn: Callable, optimizer: torch.optim.Optimizer,
                   *, return_outputs: bool = False, clip_grad_norm: float | None = None,
                   clip_grad_value: float | Callable | None = None, seed: int | None = None,
                   sam: Sam | None = None, run: RunContext | None = None) -> StepResult:
        """One optimizer step on the whole batch, however the plan splits it (``step.StepRecipe.run``).

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
                distributed engine checks every rank is on); ``None``: outside a run (no global batch number to
                check; a distributed engine's predicted losses are then each rank's own batch's).
        """
        self.run = NO_RUN if run is None else run
        recipe = StepRecipe.of(clip_grad_norm, clip_grad_value, sam, self.skip_nonfinite)
        return recipe.run(self, inputs, targets, loss_fn, optimizer, seed, return_outputs)

    def step_context(self) -> contextlib.AbstractContextManager:
        """The context a training step runs in, from ``before_step`` to ``after_step``: a no-op here; an engine on
        the ranks of a job names the step's collectives in it."""
        return NO_CONTEXT

    def before_step(self, inputs: Tensors, targets: Tensors, form: Any = None) -> None:
        """Called first in a training step, with its raw inputs and targets and the loss's normalized form
        (``losses.normalized``): a no-op here; an engine on the ranks of a job exchanges their item counts and
        loss normalizers there."""

    def step_seed(self, seed: int | None) -> int:
        """The seed the step's pieces derive their random streams from: ``seed``, or one drawn from torch's
        global generator; an engine on the ranks of a job mixes in its shard's place in the global batch."""
        return draw_step_seed() if seed is None else int(seed)

    def prepare(self, inputs: Tensors, targets: Tensors) -> BatchTensors:
        """The checked batch of a step (``tensors.prepare_batch``; an empty shard where the batch part allows it);
        with ``plan.pin_memory`` its host tensors pinned, once per batch; with ``memory_format='channels_last'``
        given explicitly, an error when no input is 4-D (it cannot apply)."""
        empty = self.ranks.empty_batch(inputs, targets, self.compute_dtype())
        if empty is not None:
            return empty
        return planned_batch(prepare_batch(inputs, targets, self.compute_dtype()), self.plan, self.pin)

    def pin(self, tensor: torch.Tensor) -> torch.Tensor:
        """A host tensor in pinned memory (its copies to a GPU then run asynchronously); others as they are."""
        if tensor.device.type != 'cpu' or tensor.is_pinned():
            return tensor
        return tensor.pin_memory()

    def groups(self, batch_size: int) -> dict[int, tuple[Piece, ...]]:
        """The pieces of a batch by replica, with their loss weights (the batch part's)."""
        return self.ranks.groups(self.plan, batch_size, self.gradient_sync.lockstep)

    def step_loss(self, loss_fn: Callable, form: Any, batch: BatchTensors, groups: Groups) -> StepLoss:
        """What each piece computes (``step.step_loss``; the whole batch's normalizer from ``batch_normalizer``)."""
        return steps.step_loss(loss_fn, form, groups, lambda: self.batch_normalizer(form, batch))

    def batch_normalizer(self, form: Any, batch: BatchTensors) -> float | torch.Tensor:
        """The loss's normalizer of the whole batch (the batch part's: over the ranks in a distributed job)."""
        return self.ranks.normalizer(form, batch)

    def gradient_pass(self, batch: BatchTensors, groups: Groups, step_loss: StepLoss, seed: int,
                      keep_outputs: bool) -> StepResult:
        """Forward and backward of every piece, then ``reduce_gradients``: the full-batch gradient on the primary;
        returns the full-batch loss (and outputs when ``keep_outputs``)."""
        return steps.gradient_pass(self, batch, groups, step_loss, seed, keep_outputs)

    def run_piece(self, replica: int, piece: Piece, batch: BatchTensors, step_loss: StepLoss, keep_outputs: bool,
                  last: bool, seed: int) -> tuple[torch.Tensor, Any]:
        """Forward and backward of one piece on one replica; returns (its share of the batch's loss, detached
        outputs or None). A piece without items (of a ``lockstep`` sync part) only joins its collectives.

        The piece draws its random numbers (dropout) from its own generator state, derived from the step ``seed``;
        under ``'randomness': 'by_item'`` its dropout modules draw by item, its first item being item
        ``item_offset + piece.start`` of the global batch.
        """
        return steps.run_piece(self, replica, piece, batch, step_loss, keep_outputs, last, seed)

    def step_result(self, ordered: list[tuple[torch.Tensor, Any]], keep_outputs: bool) -> StepResult:
        """The full-batch loss (the sum of the weighted piece losses; over the ranks in a distributed job) and the
        outputs, on the primary device."""
        return StepResult(*self.ranks.step_result(ordered, keep_outputs, self.devices[0]))

    def optimizer_step(self, optimizer: torch.optim.Optimizer, max_norm: float | None,
                       clip_value: float | Callable | None) -> None:
        """Unscale and clip the full-batch gradient (when asked to), then take the one optimizer step of the batch;
        on an error (or Ctrl-C) the precision forgets the step, so the next one starts afresh."""
        steps.optimizer_step(self, optimizer, max_norm, clip_value)

    def clip_gradients(self, params: list[torch.Tensor], norm: float | None = None,
                       value: float | Callable | None = None) -> None:
        """Clip the full-batch gradients of ``params`` in place (``clipping.clip``: by ``value``, then to the total
        2-norm ``norm``); torch's clipping takes a sharded module's ``DTensor`` gradients whole (the global norm)."""
        clip(params, norm, value)

    def nonfinite(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the full-batch ``loss`` or the full-batch gradient of the optimizer's parameters holds a nan or
        an inf (an inf input can give a finite loss and an inf gradient); one host synchronization, the same
        answer on every rank (the sync part combines the ranks' flags where their gradients differ).

        Under a gradient scaler only the loss is read: the scaler skips the steps of non-finite (scaled)
        gradients itself, and lowers its scale, which a step skipped here would not.
        """
        return self.gradient_sync.any_nonfinite(self.nonfinite_flag(loss, optimizer))

    def nonfinite_flag(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> torch.Tensor:
        """``nonfinite`` of this process as a one-item tensor on the loss's device (non-zero: found), not read on
        the host (``step.NonfiniteCheck``; a sharded gradient's local shards)."""
        return self._nonfinite.flag(loss, optimizer, self.precision.scaler is None)

    def save_buffers(self) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """The primary's buffers and copies of their values, before a step's forwards change them (BatchNorm
        running statistics); ``None`` for a module without buffers."""
        return self._buffer_copies.save(list(self.module.buffers()))

    @torch.no_grad()
    def skip_step(self, optimizer: torch.optim.Optimizer,
                  saved: tuple[list[torch.Tensor], list[torch.Tensor]] | None) -> None:
        """Leave the model as before the batch: clear the gradients, restore the primary's buffers from
        ``saved`` (``save_buffers``) and copy the primary's state to the replicas."""
        self.zero_grad(optimizer)
        if saved is not None:
            torch._foreach_copy_(*saved)
        self.sync()

    def after_step(self, inputs: Tensors, result: StepResult, return_outputs: bool) -> StepResult:
        """The result the step returns, stepped or skipped: ``result`` here; an engine on the ranks of a job gives
        a rank with no items empty outputs of the right shape."""
        return result

    def item_random(self, seed: int) -> contextlib.AbstractContextManager:
        """The context of a step's passes: under ``'randomness': 'by_item'`` every replica's dropout modules draw
        their masks by item, keyed by ``seed`` (``item_random.ItemStreams``); a no-op under ``'torch'``."""
        if self.plan.randomness != BY_ITEM:
            return NO_CONTEXT
        if self._item_streams is None:
            self._item_streams = ItemStreams([self.module, *self.replicas[1:]])
        return self._item_streams.step(seed)

    # hooks handed to the placement and the gradient synchronization

    def run_replicas(self, groups: Groups, work: Callable[[int, Sequence[Piece]], list]) -> dict[int, list]:
        """``{replica: work(replica, its pieces)}`` for every replica in ``groups`` (the placement runs them)."""
        return self.placement.run(groups, work)

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Clear the gradients before a batch (``set_to_none``), the replicas' too."""
        self.gradient_sync.zero_grad(optimizer)
        self.placement.clear_grads()

    def backward_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """The context of one piece's forward and backward; ``last``: the replica's last piece of the batch."""
        return self.gradient_sync.backward_sync(last)

    def reduce_gradients(self, active: tuple[int, ...]) -> None:
        """Make the primary's ``.grad`` the full-batch gradient; ``active``: the replicas that ran pieces."""
        self.gradient_sync.reduce(active)

    def broadcast(self, active: tuple[int, ...]) -> None:
        """Send the primary's new state to the other replicas after the step; ``active`` as in
        ``reduce_gradients``."""
        self.gradient_sync.broadcast(active)

    def share_parameters(self) -> None:
        """Give the primary's parameters (SAM's perturbed weights) to the replicas."""
        self.gradient_sync.share_parameters()

    def sync(self) -> None:
        """Copy the primary's parameters and buffers to the replicas (after loading weights)."""
        self.gradient_sync.sync()

    # prediction

    def predict(self, inputs: Tensors, run: RunContext | None = None) -> Any:
        """Outputs for a batch in evaluation mode, without gradients, in batch order, on the primary device
        (``run``: where the batch lies in its run, as in ``train_step``)."""
        self.run = NO_RUN if run is None else run
        return self.ranks.predict(self, inputs, self.run)

    def predict_piece(self, replica: int, piece: Piece, batch: BatchTensors) -> Any:
        """The outputs of one piece on one replica, without gradients."""
        forward, device = self.forwards[replica], self.devices[replica]
        with torch.no_grad(), self.precision.autocast(device):      # both thread-local: entered per piece
            return forward(*[move(t, device, batch.dtype, piece, self.memory_format) for t in batch.inputs])

    def batch_mean(self, mean: float, count: int, run: RunContext | None = None) -> float:
        """The whole batch's mean of a value averaged over this process's ``count`` items (``mean``): the batch
        part's (the ranks' shards combined when ``run`` says the batch is one), NaN for no items."""
        return self.ranks.batch_mean(mean, count, run)

    def predicted_loss(self, loss_fn: Callable, outputs: Any, targets: Sequence[torch.Tensor],
                       run: RunContext | None = None) -> float:
        """The loss of a predicted batch (``targets`` on the outputs' device), NaN for no items: the batch part's
        (the global batch's, from every rank's shard, when ``run`` says the batch is one)."""
        return self.ranks.predicted_loss(loss_fn, outputs, targets, run)

    def close(self) -> None:
        """Release the parts' threads and groups; the engine must not be used afterwards."""
        self.placement.close()
        self.gradient_sync.close()
        self.ranks.close()

    def __enter__(self) -> 'Engine':
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def describe(self, batch_size: int | None = None, loss: Any = None) -> str:
        """Readable placement for ``batch_size``: the plan's description (with how ``loss`` is weighted, when
        given) and what only the built engine knows (the sizes of the module's parameters and buffers, where each
        part lies, what a rank holds)."""
        text = self.gradient_sync.describe(self, batch_size, loss)
        text = self.placement.describe(self, batch_size, loss) if text is None else text
        return qualified(text, self._item_streams)     # random calls met that do not draw by item

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.describe()})'
