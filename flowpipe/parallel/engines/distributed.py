"""One replica per process: the base loop on a ``DistributedDataParallel`` module, one shard of each global batch.

The run loop hands every rank its contiguous shard of the global batch (``flowpipe.execution``). A step here:

1. the ranks exchange their item counts (one small all-gather of CPU tensors, on a gloo group of its own when the
   job's group is NCCL, so the host never waits for the GPUs' queue there), so every rank knows the global batch
   size ``n`` and whether some rank is idle (a global batch smaller than the world);
2. each piece (a micro-batch chunk of the shard) runs forward and backward through the DDP module, its mean loss
   weighted by ``piece_size / n``; DDP's gradient all-reduce is skipped (``no_sync``) until the last piece; it
   averages over the ``W`` ranks, so each backward runs on the weighted loss times ``W`` (``backward_factor``)
   and every rank holds the gradient of the whole global batch. DDP's own all-reduce runs in C++: a Python
   communication hook would leave Python objects for gloo's threads to release, which aborts a process whose
   interpreter is exiting;
3. when a rank is idle, every rank skips DDP's all-reduce and sums the gradients with one explicit all-reduce
   (the idle rank contributes zeros), so no rank waits for a backward that never comes;
4. every rank clips and steps alike; floating buffers (BatchNorm statistics) are averaged over the ranks that saw
   items, integer ones taken from rank 0; the full-batch loss is all-reduced.

The exchange of item counts (1.) also carries the global batch each rank is on (the shard of the call's ``run``):
ranks on different batches (``SkipBatch`` raised on some ranks only) raise there, naming the ranks and batches.
In a run with checkpoints it carries what the ranks agree on after the batch as well (the shard's ``agreement``:
a stop signal, rank 0's clock), so stopping on a signal costs no collective of its own.
A collective of a step that times out or loses a peer raises naming the step, the collective and where the other
ranks were (``distributed.collective``).
"""
from __future__ import annotations

import collections
import contextlib
import inspect
import math
from dataclasses import replace
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from ...data.shards import RunContext
from ...torchutils import NO_CONTEXT
from .. import distributed
from ..item_random import BY_ITEM
from ..plan import DevicePlan
from ..precision import Precision
from ..losses import ITEM_SHARES, NORMALIZER, PLAIN_SUM, normalized, weighting
from ..randomness import piece_seed
from ..run_end import RUN_ENDED, check_same_batch, count_row
from ..speed import compiled
from ..split import Piece, split_batch
from .base import Engine, StepResult
from .reduce import buckets
from .tensors import BatchTensors, as_batch, concat, move, set_mode, to_device

__all__ = ['DistributedEngine']

# Buffers are synchronized by the engine after each step (an idle rank runs no forward, so DDP's per-forward
# buffer broadcast would wait for it forever); the keyword changed name in recent torch versions.
_NO_BUFFER_SYNC = ({'forward_sync_buffers': False}
                   if 'forward_sync_buffers' in inspect.signature(nn.parallel.DistributedDataParallel).parameters
                   else {'broadcast_buffers': False})


def _shard_normalizer(form: Any, targets: Any) -> float | None:
    """This rank's loss normalizer, read to the host for the count exchange (a GPU target waits for the device
    here); ``None`` for a loss whose pieces are weighted by their share of the items."""
    if weighting(form) != NORMALIZER:
        return None
    tensors = as_batch(targets, 'targets')
    if not tensors or (tensors[0].dim() and not tensors[0].shape[0]):
        return 0.0                              # an idle rank counts nothing
    return float(form.normalizer(*tensors))


def _counts_need_own_group(backend: str) -> bool:
    """Whether the count exchange needs a gloo group of its own: a group whose collectives run on GPUs (NCCL)
    cannot exchange CPU tensors, and GPU tensors would make the host wait for the device's queue."""
    return backend != 'gloo'


def _coalesced(tensors: Sequence[torch.Tensor], collective: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Replace ``tensors`` by ``collective`` of their values, one flat buffer per bucket of one dtype
    (``reduce.buckets``): a few collectives per step instead of one per tensor."""
    for bucket in buckets(tensors):
        group = [tensors[i] for i in bucket]
        flat = collective(_flatten_dense_tensors(group))
        torch._foreach_copy_(group, list(_unflatten_dense_tensors(flat, group)))


# The CPU tensors of the last few collectives: gloo's worker thread releases a finished collective's tensors a
# moment after the caller goes on, and a tensor whose Python object died first makes that thread take the GIL,
# which aborts a process whose interpreter is exiting by then. Kept here, the Python objects outlive the thread's
# release (a step's last collectives are a few small tensors; a flat bucket is at most reduce.BUCKET_BYTES).
_RECENT: collections.deque = collections.deque(maxlen=4)


def _kept(*tensors: torch.Tensor) -> None:
    if tensors[0].device.type == 'cpu':
        _RECENT.append(tensors)


def _all_reduce(flat: torch.Tensor) -> torch.Tensor:
    _kept(flat)
    dist.all_reduce(flat)
    return flat


def _from_rank_0(flat: torch.Tensor) -> torch.Tensor:
    _kept(flat)
    dist.broadcast(flat, src=0)
    return flat


class DistributedEngine(Engine):
    """Runs every step on ``module`` wrapped in ``DistributedDataParallel``, on the plan's one device.

    Attributes:
        ddp: the ``DistributedDataParallel`` wrapper (``module`` is the network it wraps).
        counts: every rank's item count in the last training step (``None`` before one).
        normalizer: the global batch's loss normalizer in the last training step, the sum of the ranks' (``None``
            for a loss weighted by item shares).
    """

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        distributed.init()
        if not dist.is_initialized():
            raise RuntimeError(f'Expected an initialized process group for the distributed engine. Received: '
                               f'plan {plan.describe()!r} outside a distributed job. Start the processes with '
                               f'torchrun or flowpipe.parallel.launch.')
        device = plan.primary.device
        if dist.get_backend() == 'nccl' and device.type != 'cuda':
            raise ValueError(f"Expected a CUDA device with the NCCL backend. Received: device {plan.primary.name} "
                             f"in a NCCL process group. Use device='GPU:*' (each rank its GPU), or run the job on "
                             f"gloo (FLOWPIPE_DIST_BACKEND=gloo, or flowpipe.parallel.distributed.init('gloo')).")
        if device.type == 'cuda':
            torch.cuda.set_device(device)       # NCCL's collectives (and object gathers) run on the rank's GPU
        module = module.to(device)
        super().__init__(plan, [module], [device], precision)
        wrapper = self.wrap(module, device)
        self.replicas = [wrapper]
        self.forwards = [compiled(wrapper, plan.compile)]      # pieces run through the wrapper's forward
        self._inner = module
        self._rank = dist.get_rank()
        self._group_device = device if dist.get_backend() == 'nccl' else torch.device('cpu')
        # the count exchange runs on the CPU: on a GPU group it would make the host wait for the device every step
        self._counts_group = None
        if _counts_need_own_group(dist.get_backend()):
            limit = distributed.group_timeout()
            self._counts_group = dist.new_group(backend='gloo', **({} if limit is None else {'timeout': limit}))
        self.counts: tuple[int, ...] | None = None
        self.normalizer: float | None = None
        self._idle_rank = False
        self.steps = 0
        self._phase, self._batch = '', -1

    def wrap(self, module: nn.Module, device: torch.device) -> nn.Module:
        """The module pieces run through: ``module`` wrapped in ``DistributedDataParallel`` (kept as ``ddp``)."""
        self.ddp = nn.parallel.DistributedDataParallel(
            module, device_ids=[device] if device.type == 'cuda' else None, **_NO_BUFFER_SYNC)
        return self.ddp

    def close(self) -> None:
        """Release the count exchange's own group (if any) while the job's group lives."""
        group, self._counts_group = self._counts_group, None
        if group is not None and dist.is_initialized():
            dist.destroy_process_group(group)

    @property
    def module(self) -> nn.Module:
        """The network (not its DDP wrapper): ``state_dict`` keys and parameters as in one process."""
        return self._inner

    @property
    def global_size(self) -> int | None:
        """The global batch size of the last training step."""
        return None if self.counts is None else sum(self.counts)

    def step_context(self) -> contextlib.AbstractContextManager:
        """Counts the step and runs it under ``distributed.collective``: a collective of the step that times out
        or loses a peer raises naming the step and the phase it was in."""
        self.steps += 1
        return distributed.collective(self._where)

    def _where(self) -> str:
        batch = f' (global batch {self._batch} of the run)' if self._batch >= 0 else ''
        return f'{self._phase} of training step {self.steps}{batch}'

    def before_step(self, inputs: Any, targets: Any, form: Any = None) -> None:
        """Exchange the ranks' item counts and loss normalizers: the global batch size and normalizer the pieces
        are weighted by, and whether a rank is idle (its shard is empty), which decides how the gradients are
        all-reduced."""
        self.take_counts(inputs, targets, form)
        self._idle_rank = min(self.counts) == 0
        # DDP's own all-reduce (C++, no Python callback on gloo's threads) averages over the ranks; a step with an
        # idle rank sums its gradients itself (reduce_gradients)
        self.backward_factor = 1.0 if self._idle_rank else float(len(self.counts))
        if not self.counts[self._rank]:
            # DDP rebuilds its gradient buckets (a broadcast) in the first forward after its first synchronized
            # backward; a rank that runs no forward joins it here, as torch's own join hook does
            self.ddp.reducer._rebuild_buckets()

    def take_counts(self, inputs: Any, targets: Any = (), form: Any = None) -> None:
        """Exchange the ranks' item counts into ``counts`` and the sum of their loss normalizers into
        ``normalizer`` (counted when the loss declares one, ``form``); an error when every rank has no items."""
        local = _shard_normalizer(form, targets)
        self.counts, normalizers = self._exchange_counts(inputs, local)
        self.normalizer = sum(normalizers) if local is not None else None
        if not sum(self.counts):
            raise ValueError('Expected a non-empty global batch. Received: 0 items on every rank.')
        self.item_offset = sum(self.counts[:self._rank])    # this rank's first item in the global batch

    def batch_normalizer(self, form: Any, batch: BatchTensors) -> float:
        """The global batch's normalizer: the sum of the ranks', exchanged with the item counts."""
        return self.normalizer

    def step_seed(self, seed: int | None) -> int:
        """The step seed (the same on every rank in a seeded run); under ``'randomness': 'torch'`` mixed with the
        shard's offset in the global batch, so the ranks' pieces draw different dropout masks, as the pieces of one
        process do (under ``'by_item'`` the pieces' streams are keyed by their global items instead)."""
        seed = super().step_seed(seed)
        return seed if self.plan.randomness == BY_ITEM else piece_seed(seed, -1, self.item_offset)

    def after_step(self, inputs: Any, result: StepResult, return_outputs: bool) -> StepResult:
        """An idle rank's outputs, when asked for: empty ones of the busy ranks' shape and dtype, as its
        predictions are."""
        if return_outputs and not self.counts[self._rank]:
            result = replace(result, outputs=self.predict(inputs))
            set_mode(self.replicas, True)
        return result

    def prepare(self, inputs: Any, targets: Any) -> BatchTensors:
        """The shard's tensors; an empty shard is allowed (its rank only joins the collectives)."""
        tensors, targets_ = as_batch(inputs, 'inputs'), as_batch(targets, 'targets')
        if tensors and all(t.dim() and t.shape[0] == 0 for t in (*tensors, *targets_)):
            return BatchTensors(tensors, targets_, 0, self.compute_dtype())
        return super().prepare(tensors, targets_)

    def _exchange_counts(self, inputs: Any, normalizer: float | None = None
                         ) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Every rank's item count and loss normalizer (``normalizer``: this rank's, or ``None`` and 0 exchanged),
        in rank order (one all-gather, which also checks that every rank is on the same global batch and carries the
        shard's ``agreement``)."""
        tensors = as_batch(inputs, 'inputs')
        local = int(tensors[0].shape[0]) if tensors and tensors[0].dim() else 0
        shard = self.run.shard
        self._batch = -1 if shard is None else shard.batch
        if shard is not None and shard.stepped is not None and not any(e is self for e in shard.stepped):
            shard.stepped.append(self)          # the run's first engine to step checks that the ranks end alike
        agreement = None if shard is None else shard.agreement
        flags = (0, 0) if agreement is None else agreement.mine()
        rows = self._gather_rows(local, self._batch, normalizer or 0.0, flags)
        if agreement is not None:
            agreement.record([(due, stop) for *_, due, stop in rows])
        self._phase = 'the gradient all-reduce'
        return tuple(int(row[0]) for row in rows), tuple(row[2] for row in rows)

    def _gather_rows(self, local: int, batch: int, normalizer: float, flags: tuple[int, int] = (0, 0)
                     ) -> list[list[float]]:
        """Every rank's ``[count, batch, normalizer, due, stop]`` (``run_end.count_row``: one all-gather on the count
        group; ``flags``: this rank's ``Agreement.mine``); an error on every rank when the ranks are on different
        global batches, or some ended the run (``RUN_ENDED``) while others train."""
        self._phase = 'the exchange of item counts'
        mine = count_row(local, batch, normalizer, flags)
        every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        _kept(mine, *every)
        dist.all_gather(every, mine, group=self._counts_group)
        rows = torch.stack(every).tolist()
        check_same_batch([int(row[1]) for row in rows], f'training step {self.steps}')
        return rows

    def end_run(self) -> None:
        """At the normal end of a sharded run (this engine the run's first to step): one more exchange of item
        counts, with the run's end for the batch, so that a rank still training on a last batch the others
        skipped, and the ranks that skipped it, fail with the cause instead of waiting for the timeout."""
        self.steps, self._batch = self.steps + 1, -1
        with distributed.collective(self._where):
            self._gather_rows(0, RUN_ENDED, 0.0)
        self.steps -= 1

    def groups(self, batch_size: int) -> dict[int, tuple[Piece, ...]]:
        """This rank's pieces (its shard cut into micro-batch chunks), each weighted by its share of the global
        batch; none for an empty shard."""
        if batch_size == 0:
            return {}
        total = self.global_size or batch_size
        key = (batch_size, total)
        groups = self._groups.get(key)
        if groups is None:
            pieces = tuple(replace(piece, weight=piece.size / total)
                           for piece in split_batch(batch_size, 1, self.plan.microbatch))
            groups = self._groups[key] = {0: pieces}
        return groups

    def predicted_loss(self, loss_fn: Callable, outputs: Any, targets: Sequence[torch.Tensor],
                       run: RunContext | None = None) -> float:
        """The global batch's loss from every rank's shard (one all-reduce of its sum and normalizer, or of its mean
        and item count for a loss flowpipe cannot place, every rank joins); a whole batch's own loss when the
        prediction is not on a shard (a validation run gives each rank whole batches)."""
        if run is None or run.shard is None:
            return super().predicted_loss(loss_fn, outputs, targets)
        form = normalized(loss_fn)
        rule, count = weighting(form), int(targets[0].shape[0]) if targets[0].dim() else 1
        if rule == ITEM_SHARES:
            return self.batch_mean(super().predicted_loss(loss_fn, outputs, targets), count, run)
        with torch.no_grad():
            total = float(form.sum(outputs, *targets)) if count else 0.0
        if rule == PLAIN_SUM:           # the sum over the ranks, divided once by 1
            return self._reduced_ratio(total, 1.0 if self._rank == 0 else 0.0)
        return self._reduced_ratio(total, float(form.normalizer(*targets)) if count else 0.0)

    def backward_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """DDP's all-reduce runs in the backward of the last piece only, and not at all when a rank is idle."""
        if last and not self._idle_rank:
            return NO_CONTEXT
        return self.ddp.no_sync()

    @torch.no_grad()
    def reduce_gradients(self, active: tuple[int, ...]) -> None:
        """With an idle rank: one explicit all-reduce (sum) of every gradient, zeros where a rank has none."""
        if not self._idle_rank:
            return
        self._phase = 'the gradient all-reduce of a step with an idle rank'
        params = [param for param in self._inner.parameters() if param.requires_grad]
        for param in params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        _coalesced([param.grad for param in params], _all_reduce)

    @torch.no_grad()
    def broadcast(self, active: tuple[int, ...]) -> None:
        """Floating buffers averaged over the ranks that saw items, integer buffers from rank 0."""
        counts = self.counts or ()
        seen = sum(1 for count in counts if count)
        mine = 1.0 if counts and counts[self._rank] else 0.0
        buffers = list(self._inner.buffers())
        self._phase = 'the synchronization of buffers'
        if len(counts) > 1:         # every rank joins: an idle one takes the mean of the others
            _coalesced([buffer for buffer in buffers if buffer.is_floating_point()],
                       lambda flat: _all_reduce(flat * mine) / seen)
        _coalesced([buffer for buffer in buffers if not buffer.is_floating_point()], _from_rank_0)
        self._phase = 'the all-reduce of the loss'

    @torch.no_grad()
    def sync(self) -> None:
        """Every rank takes rank 0's parameters and buffers (after loading weights)."""
        with distributed.collective("the broadcast of rank 0's weights"):
            _coalesced([*self._inner.parameters(), *self._inner.buffers()], _from_rank_0)

    def step_result(self, ordered: list[tuple[torch.Tensor, Any]], keep_outputs: bool) -> StepResult:
        """The global batch's loss (all-reduced, left on the device: every rank then reads the same value for a
        non-finite check) and this rank's outputs."""
        device = self.devices[0]
        total = torch.zeros((), device=self._group_device, dtype=torch.float64)
        for loss, _ in ordered:
            total += loss.to(device=self._group_device, dtype=torch.float64)
        _kept(total)
        dist.all_reduce(total)
        outputs = concat([to_device(out, device) for _, out in ordered]) if keep_outputs and ordered else None
        return StepResult(total, outputs)

    def batch_mean(self, mean: float, count: int, run: RunContext | None = None) -> float:
        """The global batch's mean from every rank's shard mean and item count (one all-reduce; every rank joins,
        an idle one with nothing to add); a whole batch's own mean when the step is not on a shard (a validation
        run gives each rank whole batches)."""
        if run is None or run.shard is None:
            return super().batch_mean(mean, count)
        return self._reduced_ratio(mean * count if count else 0.0, count)

    def _reduced_ratio(self, total: float, normalizer: float) -> float:
        """The sum over the ranks of ``total`` over the sum of ``normalizer`` (one all-reduce): NaN when every
        normalizer is 0."""
        totals = torch.tensor([total, normalizer], dtype=torch.float64, device=self._group_device)
        with distributed.collective('the all-reduce of a predicted loss'):
            _kept(totals)
            dist.all_reduce(totals)
        total, normalizer = totals.tolist()
        return total / normalizer if normalizer else math.nan

    def predict(self, inputs: Sequence[torch.Tensor], run: RunContext | None = None) -> Any:
        """This rank's outputs, from the network itself (no collective), micro-batch by micro-batch as in one
        process: an empty shard gives empty outputs."""
        batch = self.prepare(inputs, ())
        device = self.devices[0]
        set_mode(self.replicas, False)
        pieces = split_batch(batch.size, 1, self.plan.microbatch) if batch.size else (None,)
        with torch.no_grad(), self.precision.autocast(device):
            return concat([self._inner(*[move(t, device, batch.dtype, piece, self.memory_format) for t in batch.inputs])
                           for piece in pieces])

