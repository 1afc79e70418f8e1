"""Pipeline parallelism: each rank of a pipeline holds one stage of the network (``StagePlacement``) and the stages
run the micro-batches of a batch on a ``torch.distributed.pipelining`` schedule (1F1B or GPipe); pipelines are
replicated over the data-parallel ranks of the mesh.

Every rank of a pipeline reads the same part of each global batch (the run's data side asks the mesh). A step:

1. the pipelines exchange their item counts and loss normalizers (one all-reduce over the ``dp`` group), so every
   rank knows the global batch size and normalizer;
2. the part is cut into micro-batches of ``microbatch`` items (the last one shorter); the schedule's stages pass
   activations of a fixed shape, so every micro-batch is padded to the longest with zero rows, which the last stage
   drops before the loss (they add exactly zero to every gradient);
3. the last stage computes each micro-batch's loss as the other engines do (its sum over the global normalizer,
   ``flowpipe.parallel.losses``), and the schedule runs every backward on it as it is (``scale_grads=False``:
   never rescaled per micro-batch), so each stage accumulates its part of the full-batch gradient;
4. each stage's gradients are summed over the pipelines (the sync part, ``stage_sync.StageAllReduce``: one
   all-reduce over the ``dp`` group), the norm for clipping over the stages (``clipping.clip_over_group``); every
   rank steps its stage's parameters; the loss is all-reduced over the world.

The step is the step recipe's (``step.StepRecipe``: the non-finite check, clipping, a skipped step's restored
buffers) through the hooks below: ``prepare`` checks the part over the pipeline and exchanges the global batch
size and normalizer, ``groups`` and ``step_loss`` weigh the micro-batches, ``gradient_pass`` runs the schedule.

Predictions run the forward through the stages (forward only) and every rank of a pipeline gets the outputs.
A schedule with fewer micro-batches than stages (a short last batch) runs as GPipe: the same arithmetic.
"""
from __future__ import annotations

import contextlib
import copy
import math
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from ...data.shards import NO_RUN, RunContext
from .. import distributed
from ..losses import ITEM_SHARES, PLAIN_SUM, StepLoss, normalized, weighting
from ..plan import DevicePlan
from ..precision import Precision
from ..sharded_state import skeleton
from ..split import Piece, split_batch
from ..stages import no_shards
from .base import Engine, StepResult
from .clipping import clip_over_group
from .stage_items import ChunkItems, part_offset
from .stage_placement import StagePlacement, check_chain
from .stage_sync import StageAllReduce
from .tensors import BatchTensors, as_batch, concat, set_mode

__all__ = ['PipelineEngine']


def _take(outputs: Any, rows: torch.Tensor) -> Any:
    if isinstance(outputs, torch.Tensor):
        return outputs[rows]
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_take(out, rows) for out in outputs)
    raise TypeError(f'Expected a pipelined network to return a tensor or a tuple of tensors. Received: '
                    f'{type(outputs).__name__}.')


class PipelineEngine(Engine):
    """Runs this rank's stage of ``module`` in its pipeline (see the module docstring).

    Attributes:
        placement: the stage this rank holds (``StagePlacement``).
        skeleton: the network before it was cut, parameters on the ``meta`` device (for model files).
        counts: every pipeline's item count in the last training step.
    """

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        distributed.init()
        if plan.compile or plan.memory_format is not None or plan.amp == 'float16':
            raise ValueError(f"Expected no compile or memory_format, and amp only as 'bfloat16' (no loss scaler: its "
                             f"skipped steps are not agreed over the stages), with 'pipeline'. Received: "
                             f"amp={plan.amp!r}, compile={plan.compile!r}, memory_format={plan.memory_format!r}. Drop "
                             f"them, or give amp='bfloat16'.")
        device = plan.primary.device
        self.skeleton = skeleton(module)       # what a model file stores of a network given in the config
        placement = StagePlacement(module, plan.pipeline, plan.mesh, device)
        mesh = plan.mesh
        self._pp = _my_group(mesh.groups('pp'), dist.get_rank())
        dp = _my_group(mesh.groups('dp'), dist.get_rank()) if mesh.data_size > 1 else None
        super().__init__(plan, placement, StageAllReduce(dp), precision)
        self._network, self._checked, self._meta_network, self._dp = module, False, None, dp
        self._pipeline_ranks = mesh.group('pp')
        self._schedules: dict[tuple[int, int, bool], Any] = {}
        self.counts: tuple[int, int] | None = None
        self._step: dict[str, Any] = {}
        self._chunk_items = ChunkItems()
        self._form: Any = None
        self._global: tuple[int, float] = (0, 0.0)

    @property
    def module(self) -> nn.Module:
        """The network, as one process holds it (the other stages' children on the ``meta`` device)."""
        return self._network

    def parameters(self):
        """This stage's parameters: build the optimizer on these."""
        return self.placement.chain.parameters()

    def prepare(self, inputs: Any, targets: Any) -> Any:
        """The part's tensors (an empty part is allowed: its pipeline only joins the collectives), checked over the
        pipeline (``_check``); the global batch size and loss normalizer exchanged over the pipelines."""
        batch = self._part(inputs, targets)
        self._check(batch)
        self._global = self._exchange(batch, self._form)
        return batch

    def _part(self, inputs: Any, targets: Any) -> Any:
        inputs, targets = as_batch(inputs, 'inputs'), as_batch(targets, 'targets')
        if inputs and all(t.dim() and t.shape[0] == 0 for t in (*inputs, *targets)):
            return BatchTensors(list(inputs), list(targets), 0, self.compute_dtype())
        return super().prepare(inputs, targets)

    # the schedule

    def _schedule(self, size: int, chunks: int, training: bool) -> Any:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
        key = (size, chunks, training)
        if key not in self._schedules:
            stage = PipelineStage(self.placement.chain, self.placement.stage, len(self.placement.parts),
                                  self.devices[0], group=self._pp)
            kind = Schedule1F1B if self.plan.pipeline.schedule == '1f1b' and chunks >= len(
                self.placement.parts) and training else ScheduleGPipe
            self._schedules[key] = kind(stage, chunks, loss_fn=self._chunk_loss if training else None,
                                        scale_grads=False)
            self._chunk_items.wrap(stage)
        return self._schedules[key]

    def _padded(self, batch_inputs: Sequence[torch.Tensor], pieces: Sequence[Piece], size: int
                ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The inputs with every micro-batch padded to ``size`` rows, and each row's item (-1: padding)."""
        positions = torch.full((len(pieces) * size,), -1, dtype=torch.long)
        for index, piece in enumerate(pieces):
            positions[index * size:index * size + piece.size] = torch.arange(piece.start, piece.stop)
        rows = positions.clamp(min=0)
        device, dtype = self.devices[0], self.compute_dtype()
        padded = []
        for tensor in batch_inputs:
            values = tensor[rows].to(device)
            if values.is_floating_point() and dtype is not None:
                values = values.to(dtype)
            values[(positions < 0).to(values.device)] = 0
            padded.append(values)
        return padded, positions

    def _run_schedule(self, batch: Any, pieces: Sequence[Piece], training: bool) -> Any:
        size = max(piece.size for piece in pieces)
        inputs, positions = self._padded(batch.inputs, pieces, size)
        schedule = self._schedule(size, len(pieces), training)
        # by micro-batch: the stage's first step may call the loss once more (torch's shape inference)
        self._step.update(positions=positions, starts={piece.start: piece for piece in pieces}, losses={},
                          outputs={})
        args = inputs if self.placement.first else ()
        if not training:
            output = schedule.eval(*args)
            if self.placement.last:
                return _take(output, (positions >= 0).to(_device_of(output)))
            return None
        target = positions.to(self.devices[0]) if self.placement.last else None
        schedule.step(*args, target=target, losses=[] if self.placement.last else None)
        return None

    def _chunk_loss(self, outputs: Any, positions: torch.Tensor) -> torch.Tensor:
        """One micro-batch's share of the global batch's loss, on the last stage (the schedule's ``loss_fn``)."""
        step = self._step
        real = positions >= 0
        items = positions[real]
        piece = step['starts'][int(items[0])]
        kept = _take(outputs, real)
        device, dtype = self.devices[0], step['batch'].dtype
        targets = []
        for tensor in step['batch'].targets:
            values = tensor[items.cpu()].to(device)
            targets.append(values.to(dtype) if values.is_floating_point() and dtype is not None else values)
        loss = step['loss'].fn(kept, *targets)
        weighted = step['loss'].weigh(self.precision.convert_loss(loss), piece)
        step['losses'][piece.start] = weighted.detach()
        if step['keep']:
            step['outputs'][piece.start] = _mapped(kept, torch.Tensor.detach)
        return self.precision.scale(weighted)

    # training

    def train_step(self, inputs: Any, targets: Any, loss_fn: Callable, optimizer: torch.optim.Optimizer, *,
                   sam: Any = None, **options: Any) -> StepResult:
        """One optimizer step of every stage on the global batch (``step.StepRecipe`` through the hooks below)."""
        if sam is not None:
            raise ValueError("Expected no sam_rho with 'pipeline' (not supported yet). Received: a SAM step. Drop sam_rho.")
        return super().train_step(inputs, targets, loss_fn, optimizer, **options)

    def step_context(self) -> contextlib.AbstractContextManager:
        return distributed.collective(lambda: 'a pipelined training step')

    def before_step(self, inputs: Any, targets: Any, form: Any = None) -> None:
        self._form = form

    def groups(self, batch_size: int) -> dict[int, tuple[Piece, ...]]:
        """The part's micro-batches, each weighted by its share of the global batch (none for an empty part)."""
        total = self._global[0]
        return {0: tuple(Piece(p.chunk, 0, p.start, p.stop, p.size / total)
                         for p in split_batch(batch_size, 1, self.plan.microbatch))} if batch_size else {}

    def step_loss(self, loss_fn: Callable, form: Any, batch: Any, groups: Any) -> StepLoss:
        """What each micro-batch's loss is (``losses.StepLoss``, as every engine weighs it: a sum over the global
        normalizer, or a mean weighted by the micro-batch's share of the global batch)."""
        rule = weighting(form)
        if rule == ITEM_SHARES:
            return StepLoss(loss_fn)
        return StepLoss(form.sum, 1 if rule == PLAIN_SUM else self._global[1])

    def gradient_pass(self, batch: Any, groups: Any, step_loss: StepLoss, seed: int, keep_outputs: bool
                      ) -> StepResult:
        """The schedule's forwards and backwards of the part's micro-batches, the stage's gradients summed over the
        pipelines (the sync part), the loss over the world; the outputs on every rank of the pipeline."""
        pieces = groups.get(0, ())
        self._step = {'batch': batch, 'loss': step_loss, 'keep': keep_outputs}
        with self.precision.autocast(self.devices[0]), self._item_chunks(batch, pieces):
            if pieces:
                self._run_schedule(batch, pieces, training=True)
        self.reduce_gradients(tuple(groups))
        return StepResult(self._loss(), self._outputs(keep_outputs, batch))

    def save_buffers(self) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """The stage's buffers and copies of their values (the other stages' are not on this rank)."""
        return self._buffer_copies.save(list(self.placement.chain.buffers()))

    def _item_chunks(self, batch: Any, pieces: Sequence[Piece]) -> contextlib.AbstractContextManager:
        """Under ``'randomness': 'by_item'``, the step's context that tells the stage's dropout modules the items of
        every micro-batch (``stage_items``; a collective of every rank, with items or without)."""
        if self._item_streams is None:
            return contextlib.nullcontext()
        return self._chunk_items.step(self._item_streams, part_offset(batch.size, self._dp, self.plan.mesh), pieces)

    def _check(self, batch: Any) -> None:
        """At every step, that the ranks of the pipeline hold the same items (one small all-reduce over the
        pipeline: a run that did not read the model's ``'pipeline'`` before its first batch splits them, and the
        stages would wait for each other); at the first, that the network is a chain of its children."""
        shard = self.run.shard
        start = -1 if shard is None else shard.start
        values = torch.tensor([batch.size, -batch.size, start, -start], dtype=torch.float64)
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self._pp)
        if values[0] != -values[1] or values[2] != -values[3]:
            raise ValueError(f"Expected the ranks of a pipeline {list(self._pipeline_ranks)} to step on the same "
                             f"items. Received: {batch.size} items from item {start} of the global batch on rank "
                             f"{dist.get_rank()}, and between {int(-values[1])} and {int(values[0])} items on the "
                             f"pipeline's ranks. Give 'pipeline' in the model config of init_model as a value or an "
                             f"expression of the pipeline config (C(...)), which the run reads before its first "
                             f"batch, and predict with a pipelined model in runs of pipelines that declare it.")
        if not self._checked and batch.size:
            check_chain(self._network, [t[:1] for t in batch.inputs], batch.dtype)
            self._checked = True

    def _exchange(self, batch: Any, form: Any) -> tuple[int, float]:
        """The global batch size and loss normalizer: every pipeline's, summed over the ``dp`` group."""
        local = 0.0
        if weighting(form) not in (ITEM_SHARES, PLAIN_SUM) and batch.size:
            local = float(form.normalizer(*batch.targets))
        values = torch.tensor([batch.size, local], dtype=torch.float64)
        if self._dp is not None:
            dist.all_reduce(values, group=self._dp)
        total, normalizer = int(values[0]), float(values[1])
        if not total:
            raise ValueError('Expected a non-empty global batch. Received: 0 items on every rank.')
        self.counts = (batch.size, total)
        return total, normalizer

    def _loss(self) -> torch.Tensor:
        """The global batch's loss: the last stages' micro-batch losses summed over the world."""
        total = torch.zeros((), dtype=torch.float64)
        for loss in self._step.get('losses', {}).values():
            total += loss.detach().cpu().to(torch.float64)
        dist.all_reduce(total)
        return total

    def _outputs(self, wanted: bool, batch: Any) -> Any:
        """The outputs of this pipeline's items on every rank of the pipeline (sent from the last stage), on this
        rank's device; an idle pipeline's are empty, of the shape the network gives (traced on ``meta``)."""
        if not wanted:
            return None
        if not batch.size:
            return self._empty_outputs(batch)
        outputs = self._step.get('outputs', {})
        box = [concat([_mapped(out, torch.Tensor.cpu) for _, out in sorted(outputs.items())])
               if self.placement.last else None]
        dist.broadcast_object_list(box, src=self._pipeline_ranks[-1], group=self._pp)
        return _mapped(box[0], lambda tensor: tensor.to(self.devices[0]))

    def _empty_outputs(self, batch: Any) -> Any:
        if self._meta_network is None:
            self._meta_network = copy.deepcopy(self.skeleton).to('meta')
        with torch.no_grad():
            traced = self._meta_network(*[torch.empty(t.shape, device='meta', dtype=batch.dtype if (
                t.is_floating_point() and batch.dtype) else t.dtype) for t in batch.inputs])
        return _mapped(traced, lambda out: torch.empty(out.shape, dtype=out.dtype, device=self.devices[0]))

    def clip_gradients(self, params: list[torch.Tensor], norm: float | None = None,
                       value: float | Callable | None = None) -> None:
        """Clip by value on each stage, then to the total 2-norm over every stage's gradient
        (``clipping.clip_over_group``: one all-reduce over the pipeline)."""
        clip_over_group(params, self._pp, norm, value)

    # prediction and state

    def predict(self, inputs: Sequence[torch.Tensor], run: RunContext | None = None) -> Any:
        """The outputs of this pipeline's items, forward through the stages, on every rank of the pipeline."""
        self.run = NO_RUN if run is None else run
        batch = self._part(inputs, ())
        set_mode(self.replicas, False)
        pieces = split_batch(batch.size, 1, self.plan.microbatch) if batch.size else ()
        self._step = {'outputs': []}
        with torch.no_grad():
            self._check(batch)
            if pieces:
                with self.precision.autocast(self.devices[0]):
                    output = self._run_schedule(batch, pieces, training=False)
                self._step['outputs'] = {} if output is None else {0: output}
        return self._outputs(True, batch)

    def predicted_loss(self, loss_fn: Callable, outputs: Any, targets: Sequence[torch.Tensor],
                       run: RunContext | None = None) -> float:
        """The global batch's loss from every pipeline's part (one all-reduce of its sum and normalizer over the
        ``dp`` group, every rank joins); a whole batch's own loss when the prediction is not on a part."""
        if run is None or run.shard is None or self._dp is None:
            return super().predicted_loss(loss_fn, outputs, targets)
        form = normalized(loss_fn)
        rule, count = weighting(form), int(targets[0].shape[0]) if targets[0].dim() else 1
        with torch.no_grad():
            if rule == ITEM_SHARES:         # a mean over items: weighted by the part's items
                total, normalizer = (float(loss_fn(outputs, *targets)) * count if count else 0.0), float(count)
            else:
                total = float(form.sum(outputs, *targets)) if count else 0.0
                normalizer = (float(self.plan.mesh.data_rank == 0) if rule == PLAIN_SUM else
                              float(form.normalizer(*targets)) if count else 0.0)
        values = torch.tensor([total, normalizer], dtype=torch.float64)
        dist.all_reduce(values, group=self._dp)
        return float(values[0] / values[1]) if values[1] else math.nan

    def state_dict(self) -> dict:
        return self.placement.state_dict()

    def load_state_dict(self, state: Any) -> None:
        self.placement.load_state_dict(state)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        return self.placement.optimizer_state_dict(optimizer)

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: Any) -> None:
        self.placement.load_optimizer_state_dict(optimizer, state)

    def sharded_state_dict(self, optimizer: torch.optim.Optimizer, with_optimizer: bool | None = None) -> dict:
        """Refused (``stages.no_shards``): run checkpoints of a pipelined model gather the stages into the file."""
        raise no_shards(len(self.placement.parts))

    def sync(self) -> None:
        """Nothing to copy: every rank loaded its stage from the whole state."""

    def describe(self, batch_size: int | None = None, loss: Any = None) -> str:
        held = sum(p.numel() * p.element_size() for p in self.placement.chain.parameters())
        lines = self.plan.describe(batch_size, loss=loss).splitlines()
        stage = self.plan.pipeline.describe(self.placement.parts, self.placement.stage)
        at = next((i for i, line in enumerate(lines) if line.startswith('  pipeline:')), 1)
        lines[at:at + 1] = stage + [f'  this rank holds {held:,} bytes of parameters (its stage)']
        return '\n'.join(lines)


def _my_group(groups: Sequence[Sequence[int]], rank: int) -> Any:
    """Every group created (``new_group`` is a collective of every rank, in the same order), this rank's returned."""
    mine = None
    for ranks in groups:
        group = dist.new_group(list(ranks))
        if rank in ranks:
            mine = group
    return mine


def _device_of(outputs: Any) -> torch.device:
    return outputs.device if isinstance(outputs, torch.Tensor) else _device_of(outputs[0])


def _mapped(outputs: Any, function: Callable[[torch.Tensor], Any]) -> Any:
    """``function`` of every tensor of ``outputs`` (a tensor or nested tuples and lists of them)."""
    if isinstance(outputs, torch.Tensor):
        return function(outputs)
    return type(outputs)(_mapped(out, function) for out in outputs)
