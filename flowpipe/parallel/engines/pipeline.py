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
4. each stage's gradients are summed over the pipelines (one all-reduce over the ``dp`` group), the norm for
   clipping over the stages; every rank steps its stage's parameters; the loss is all-reduced over the world.

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
from .clipping import check_clip_value, check_max_norm
from .stage_items import ChunkItems, part_offset
from .stage_placement import StagePlacement, check_chain
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

    collective_state = True

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        distributed.init()
        if plan.compile or plan.memory_format is not None or plan.amp == 'float16':
            raise ValueError(f"Expected no compile or memory_format, and amp only as 'bfloat16' (no loss scaler: its "
                             f"skipped steps are not agreed over the stages), with 'pipeline'. Received: "
                             f"amp={plan.amp!r}, compile={plan.compile!r}, memory_format={plan.memory_format!r}. Drop "
                             f"them, or give amp='bfloat16'.")
        device = plan.primary.device
        self.skeleton = skeleton(module)       # what a model file stores of a network given in the config
        self.placement = StagePlacement(module, plan.pipeline, plan.mesh, device)
        super().__init__(plan, self.placement, None, precision)
        self._network, self._checked, self._meta_network = module, False, None
        mesh = plan.mesh
        self._pp = _my_group(mesh.groups('pp'), dist.get_rank())
        self._dp = _my_group(mesh.groups('dp'), dist.get_rank()) if mesh.data_size > 1 else None
        self._pipeline_ranks = mesh.group('pp')
        self._schedules: dict[tuple[int, int, bool], Any] = {}
        self.counts: tuple[int, int] | None = None
        self._step: dict[str, Any] = {}
        self._chunk_items = ChunkItems()

    @property
    def module(self) -> nn.Module:
        """The network, as one process holds it (the other stages' children on the ``meta`` device)."""
        return self._network

    def parameters(self):
        """This stage's parameters: build the optimizer on these."""
        return self.placement.chain.parameters()

    def prepare(self, inputs: Any, targets: Any) -> Any:
        """The part's tensors; an empty part is allowed (its pipeline only joins the collectives)."""
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
                   return_outputs: bool = False, clip_grad_norm: float | None = None,
                   clip_grad_value: float | Callable | None = None, seed: int | None = None,
                   sam: Any = None, run: RunContext | None = None) -> StepResult:
        """One optimizer step of every stage on the global batch (see the module docstring)."""
        self.run = NO_RUN if run is None else run
        if sam is not None:
            raise ValueError("Expected no sam_rho with 'pipeline' (not supported yet). Received: a SAM step. Drop sam_rho.")
        max_norm, clip_value = check_max_norm(clip_grad_norm), check_clip_value(clip_grad_value)
        with distributed.collective(lambda: 'a pipelined training step'):
            batch = self.prepare(as_batch(inputs, 'inputs'), as_batch(targets, 'targets'))
            self._check(batch)
            step_loss, pieces = self._pieces(batch, loss_fn)
            set_mode(self.replicas, True)
            self.zero_grad(optimizer)
            self._step = {'batch': batch, 'loss': step_loss, 'keep': return_outputs}
            with self.item_random(self.step_seed(seed)), self.precision.autocast(self.devices[0]), \
                    self._item_chunks(batch, pieces):         # dropout masks by item, when the plan says so
                if pieces:
                    self._run_schedule(batch, pieces, training=True)
            loss = self._reduce(optimizer)
            outputs = self._outputs(return_outputs, batch)
            stepped = not (self.skip_nonfinite and self.nonfinite(loss, optimizer))
            if stepped:
                self.optimizer_step(optimizer, max_norm, clip_value)
            else:
                self.zero_grad(optimizer)
            return StepResult(loss, outputs, stepped)

    def _item_chunks(self, batch: Any, pieces: Sequence[Piece]) -> contextlib.AbstractContextManager:
        """Under ``'randomness': 'by_item'``, the step's context that tells the stage's dropout modules the items of
        every micro-batch (``stage_items``; a collective of every rank, with items or without)."""
        if self._item_streams is None or not self._chunk_items.needed(self._network):
            return contextlib.nullcontext()
        return self._chunk_items.step(self._item_streams, part_offset(batch.size, self._dp, self.plan.mesh), pieces)

    def _pieces(self, batch: Any, loss_fn: Callable) -> tuple[StepLoss, tuple[Piece, ...]]:
        """What each micro-batch's loss is (``losses.StepLoss``, as every engine weighs it: a sum over the global
        normalizer, or a mean weighted by the micro-batch's share of the global batch) and the micro-batches."""
        form = normalized(loss_fn)
        total, normalizer = self._exchange(batch, form)
        rule = weighting(form)
        step_loss = StepLoss(loss_fn) if rule == ITEM_SHARES else StepLoss(form.sum,
                                                                            1 if rule == PLAIN_SUM else normalizer)
        pieces = tuple(Piece(p.chunk, 0, p.start, p.stop, p.size / total)
                       for p in split_batch(batch.size, 1, self.plan.microbatch)) if batch.size else ()
        return step_loss, pieces

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

    @torch.no_grad()
    def _reduce(self, optimizer: torch.optim.Optimizer) -> torch.Tensor:
        """Each stage's gradients summed over the pipelines; the loss (the last stages') summed over the world."""
        params = [param for param in self.placement.chain.parameters() if param.requires_grad]
        for param in params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        if self._dp is not None:
            flat = torch.cat([param.grad.reshape(-1) for param in params])
            dist.all_reduce(flat, group=self._dp)
            pieces = flat.split([param.numel() for param in params])
            torch._foreach_copy_([param.grad for param in params],
                                 [piece.view_as(param) for piece, param in zip(pieces, params)])
        losses = self._step.get('losses', {})
        total = torch.zeros((), dtype=torch.float64)
        for loss in losses.values():
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

    def nonfinite(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the loss or any stage's gradient holds a nan or an inf (the same answer on every rank)."""
        flag = self.nonfinite_flag(loss, optimizer).to(torch.float64).cpu()
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag)

    @torch.no_grad()
    def clip_gradients(self, params: list[torch.Tensor], norm: float | None = None,
                       value: float | Callable | None = None) -> None:
        """Clip by value on each stage, then to the total 2-norm over every stage's gradient (one all-reduce over
        the pipeline), as ``clip_grad_norm_`` does on the whole network."""
        from .clipping import clip
        clip(params, None, value)
        if norm is None:
            return
        grads = [param.grad for param in params if param.grad is not None]
        squares = torch.zeros((), dtype=torch.float64)
        for grad in grads:
            squares += grad.detach().double().pow(2).sum().cpu()
        dist.all_reduce(squares, group=self._pp)
        coefficient = min(1.0, norm / (math.sqrt(float(squares)) + 1e-6))
        if coefficient < 1.0:
            torch._foreach_mul_(grads, coefficient)

    # prediction and state

    def predict(self, inputs: Sequence[torch.Tensor], run: RunContext | None = None) -> Any:
        """The outputs of this pipeline's items, forward through the stages, on every rank of the pipeline."""
        self.run = NO_RUN if run is None else run
        batch = self.prepare(as_batch(inputs, 'inputs'), ())
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
