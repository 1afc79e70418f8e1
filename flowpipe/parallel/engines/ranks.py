"""The batch part of an engine: how a step's batch lies over processes, and what the step's numbers are made of.

``OneProcess``: the whole batch is here; its pieces are the plan's (chunks over replicas), its loss and normalizer
this process's own. ``DataRanks``: each rank of a distributed job holds its contiguous shard of the global batch:

1. the ranks exchange their item counts and loss normalizers (one small all-gather of CPU tensors, on a gloo group
   of its own when the job's group is NCCL, so the host never waits for the GPUs' queue there), so every rank knows
   the global batch size ``n`` and normalizer and whether some rank is idle (a global batch smaller than the world);
2. each piece (a micro-batch chunk of the shard) is weighted by ``piece_size / n`` of the global batch; under a
   gradient synchronization that runs in ``lockstep`` (FSDP: every forward is a collective) every rank runs as many
   pieces as the rank with the most, pieces without items on the others;
3. the full-batch loss is all-reduced; predicted losses and means combine the ranks' shards (one all-reduce) when
   the call's ``run`` says the batch is a shard.

The exchange (1.) also carries the global batch each rank is on (the shard of the call's ``run``): ranks on
different batches (``SkipBatch`` raised on some ranks only) raise there, naming the ranks and batches. In a run with
checkpoints it carries what the ranks agree on after the batch as well (the shard's ``agreement``: a stop signal,
rank 0's clock), so stopping on a signal costs no collective of its own. A collective of a step that times out or
loses a peer raises naming the step, the collective and where the other ranks were (``distributed.collective``).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
import torch.distributed as dist

from ...data.shards import RunContext
from .. import distributed
from ..item_random import BY_ITEM
from ..losses import ITEM_SHARES, NORMALIZER, PLAIN_SUM, checked_normalizer, normalized, normalizer_value, weighting
from ..randomness import piece_seed
from ..run_end import RUN_ENDED, check_same_batch, count_row
from ..split import Piece, chunk_sizes, split_batch
from .collectives import all_reduce, coalesced, from_rank_0, kept
from .step import in_batch_order
from .tensors import BatchTensors, as_batch, concat, evaluating, move, set_mode, to_device

if TYPE_CHECKING:
    from .base import Engine, StepResult

__all__ = ['DataRanks', 'OneProcess', 'counts_need_own_group']


def counts_need_own_group(backend: str) -> bool:
    """Whether the count exchange needs a gloo group of its own: a group whose collectives run on GPUs (NCCL)
    cannot exchange CPU tensors, and GPU tensors would make the host wait for the device's queue."""
    return backend != 'gloo'


class OneProcess:
    """The whole batch in this process: the plan's pieces, this process's loss (see the module docstring)."""

    global_size: int | None = None

    def __init__(self) -> None:
        self._groups: dict[Any, dict[int, tuple[Piece, ...]]] = {}

    def empty_batch(self, inputs: Any, targets: Any, dtype: torch.dtype | None) -> BatchTensors | None:
        """``None``: an empty batch is an error here (``tensors.prepare_batch``)."""
        return None

    def groups(self, plan: Any, batch_size: int, lockstep: bool) -> dict[int, tuple[Piece, ...]]:
        """The plan's pieces of a batch by replica (replicas with pieces, ascending), computed once per size."""
        groups = self._groups.get(batch_size)
        if groups is None:
            found: dict[int, list[Piece]] = {}
            for piece in plan.pieces(batch_size):
                found.setdefault(piece.replica, []).append(piece)
            groups = self._groups[batch_size] = {replica: tuple(pieces) for replica, pieces in sorted(found.items())}
        return groups

    def normalizer(self, form: Any, batch: BatchTensors) -> float | torch.Tensor:
        """The whole batch's loss normalizer (``losses.normalizer_value``), counted before the split."""
        targets = batch.targets
        items = int(targets[0].shape[0]) if targets and targets[0].dim() else 1
        return normalizer_value(checked_normalizer(form, form.normalizer(*targets), items))

    def step_result(self, ordered: list[tuple[torch.Tensor, Any]], keep_outputs: bool, device: torch.device
                    ) -> tuple[torch.Tensor, Any]:
        """The full-batch loss (the sum of the weighted piece losses) and the outputs, on ``device``."""
        total = ordered[0][0] if len(ordered) == 1 else torch.stack([loss.to(device) for loss, _ in ordered]).sum()
        return total, concat([to_device(out, device) for _, out in ordered]) if keep_outputs else None

    def batch_mean(self, mean: float, count: int, run: RunContext | None) -> float:
        """``mean`` itself, NaN for no items."""
        return mean if count else math.nan

    def predicted_loss(self, loss_fn: Callable, outputs: Any, targets: Sequence[torch.Tensor],
                       run: RunContext | None) -> float:
        """``loss_fn`` on the whole batch, NaN for no items."""
        first = targets[0]
        if not (int(first.shape[0]) if first.dim() else 1):
            return math.nan
        with torch.no_grad():
            return float(loss_fn(outputs, *targets))

    def predict(self, engine: 'Engine', inputs: Any, run: RunContext | None) -> Any:
        """The engine's pieces run on its replicas (``Engine.predict_piece``), merged in batch order."""
        batch = engine.prepare(inputs, ())
        groups = engine.groups(batch.size)
        set_mode(engine.replicas, False)
        results = engine.run_replicas(groups, lambda replica, pieces: [
            engine.predict_piece(replica, piece, batch) for piece in pieces])
        return concat([to_device(out, engine.devices[0]) for out in in_batch_order(groups, results)])

    def close(self) -> None:
        """Nothing to release."""


class DataRanks(OneProcess):
    """The data-parallel ranks of a distributed job, each on its shard of the global batch (see the module
    docstring); ``device``: this rank's; ``own_group``: exchange the counts on a gloo group of their own.

    Attributes:
        counts: every rank's item count in the last training step (``None`` before one).
        normalizer: the global batch's loss normalizer in the last training step, the sum of the ranks' (``None``
            for a loss weighted by item shares).
        steps: the training steps taken (named in the error of a collective that fails).
    """

    def __init__(self, device: torch.device, own_group: bool):
        super().__init__()
        self.rank = dist.get_rank()
        self.group_device = device if dist.get_backend() == 'nccl' else torch.device('cpu')
        self.counts_group = None
        if own_group:
            limit = distributed.group_timeout()
            self.counts_group = dist.new_group(backend='gloo', **({} if limit is None else {'timeout': limit}))
        self.counts: tuple[int, ...] | None = None
        self.normalizer_sum: float | None = None
        self.steps = 0
        self.phase, self.batch = '', -1

    @property
    def global_size(self) -> int | None:
        """The global batch size of the last training step."""
        return None if self.counts is None else sum(self.counts)

    @property
    def idle(self) -> bool:
        """Whether some rank has no items in the last training step."""
        return min(self.counts) == 0

    def step_context(self) -> contextlib.AbstractContextManager:
        """Counts the step and runs it under ``distributed.collective``: a collective of the step that times out
        or loses a peer raises naming the step and the phase it was in."""
        self.steps += 1
        return distributed.collective(self.where)

    def where(self) -> str:
        batch = f' (global batch {self.batch} of the run)' if self.batch >= 0 else ''
        return f'{self.phase} of training step {self.steps}{batch}'

    def take_counts(self, engine: 'Engine', inputs: Any, targets: Any = (), form: Any = None) -> None:
        """Exchange the ranks' item counts into ``counts`` and the sum of their loss normalizers (counted when the
        loss declares one, ``form``); an error when every rank has no items."""
        local = _shard_normalizer(form, targets)
        self.counts, normalizers = self.exchange_counts(engine, inputs, local)
        self.normalizer_sum = sum(normalizers) if local is not None else None
        if not sum(self.counts):
            raise ValueError('Expected a non-empty global batch. Received: 0 items on every rank.')
        engine.item_offset = sum(self.counts[:self.rank])    # this rank's first item in the global batch

    def exchange_counts(self, engine: 'Engine', inputs: Any, normalizer: float | None = None
                        ) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Every rank's item count and loss normalizer (``normalizer``: this rank's, or ``None`` and 0 exchanged),
        in rank order (one all-gather, which also checks that every rank is on the same global batch, the shard of
        ``engine.run``, and carries the shard's ``agreement``)."""
        tensors = as_batch(inputs, 'inputs')
        local = int(tensors[0].shape[0]) if tensors and tensors[0].dim() else 0
        shard = engine.run.shard
        self.batch = -1 if shard is None else shard.batch
        if shard is not None and shard.stepped is not None and not any(e is engine for e in shard.stepped):
            shard.stepped.append(engine)        # the run's first engine to step checks that the ranks end alike
        agreement = None if shard is None else shard.agreement
        flags = (0, 0) if agreement is None else agreement.mine()
        rows = self.gather_rows(local, self.batch, normalizer or 0.0, flags)
        if agreement is not None:
            agreement.record([(due, stop) for *_, due, stop in rows])
        self.phase = 'the gradient all-reduce'
        return tuple(int(row[0]) for row in rows), tuple(row[2] for row in rows)

    def gather_rows(self, local: int, batch: int, normalizer: float, flags: tuple[int, int] = (0, 0)
                    ) -> list[list[float]]:
        """Every rank's ``[count, batch, normalizer, due, stop]`` (``run_end.count_row``: one all-gather on the count
        group; ``flags``: this rank's ``Agreement.mine``); an error on every rank when the ranks are on different
        global batches, or some ended the run (``RUN_ENDED``) while others train."""
        self.phase = 'the exchange of item counts'
        mine = count_row(local, batch, normalizer, flags)
        every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
        kept(mine, *every)
        dist.all_gather(every, mine, group=self.counts_group)
        rows = torch.stack(every).tolist()
        check_same_batch([int(row[1]) for row in rows], f'training step {self.steps}')
        return rows

    def end_run(self) -> None:
        """At the normal end of a sharded run: one more exchange of item counts, with the run's end for the batch,
        so that a rank still training on a last batch the others skipped, and the ranks that skipped it, fail with
        the cause instead of waiting for the timeout."""
        self.steps, self.batch = self.steps + 1, -1
        with distributed.collective(self.where):
            self.gather_rows(0, RUN_ENDED, 0.0)
        self.steps -= 1

    def step_seed(self, seed: int, plan: Any) -> int:
        """Under ``'randomness': 'torch'`` the step seed mixed with the shard's offset in the global batch, so the
        ranks' pieces draw different dropout masks, as the pieces of one process do (under ``'by_item'`` the pieces'
        streams are keyed by their global items instead)."""
        return seed if plan.randomness == BY_ITEM else piece_seed(seed, -1, sum(self.counts[:self.rank]))

    def empty_batch(self, inputs: Any, targets: Any, dtype: torch.dtype | None) -> BatchTensors | None:
        """An empty shard's tensors (its rank only joins the collectives); ``None`` for a shard with items."""
        tensors, targets = as_batch(inputs, 'inputs'), as_batch(targets, 'targets')
        if tensors and all(t.dim() and t.shape[0] == 0 for t in (*tensors, *targets)):
            return BatchTensors(tensors, targets, 0, dtype)
        return None

    def groups(self, plan: Any, batch_size: int, lockstep: bool) -> dict[int, tuple[Piece, ...]]:
        """This rank's pieces (its shard cut into micro-batch chunks), each weighted by its share of the global
        batch; under ``lockstep`` as many as any rank's (see ``pieces``), else none for an empty shard."""
        if lockstep:
            key: Any = (batch_size, self.counts)
            if key not in self._groups:
                self._groups[key] = {0: self.pieces(plan, batch_size, self.counts)}
            return self._groups[key]
        if batch_size == 0:
            return {}
        total = self.global_size or batch_size
        key = (batch_size, total)
        if key not in self._groups:
            self._groups[key] = {0: tuple(replace(piece, weight=piece.size / total)
                                          for piece in split_batch(batch_size, 1, plan.microbatch))}
        return self._groups[key]

    @staticmethod
    def pieces(plan: Any, size: int, counts: Sequence[int]) -> tuple[Piece, ...]:
        """This rank's pieces of ``size`` items, weighted by their share of the global batch (``counts``), then
        pieces without items up to the most pieces of a rank."""
        total, micro = sum(counts), plan.microbatch
        own = tuple(replace(piece, weight=piece.size / total) for piece in split_batch(size, 1, micro)) if size else ()
        most = max(len(chunk_sizes(count, micro)) for count in counts if count)
        return own + tuple(Piece(len(own) + i, 0, size, size, 0.0) for i in range(most - len(own)))

    def normalizer(self, form: Any, batch: BatchTensors) -> float:
        """The global batch's normalizer: the sum of the ranks', exchanged with the item counts."""
        return checked_normalizer(form, self.normalizer_sum, sum(self.counts))

    def step_result(self, ordered: list[tuple[torch.Tensor, Any]], keep_outputs: bool, device: torch.device
                    ) -> tuple[torch.Tensor, Any]:
        """The global batch's loss (all-reduced, left on the device: every rank then reads the same value for a
        non-finite check) and this rank's outputs."""
        total = torch.zeros((), device=self.group_device, dtype=torch.float64)
        for loss, _ in ordered:
            total += loss.to(device=self.group_device, dtype=torch.float64)
        kept(total)
        dist.all_reduce(total)
        return total, concat([to_device(out, device) for _, out in ordered]) if keep_outputs and ordered else None

    def after_step(self, engine: 'Engine', inputs: Any, result: 'StepResult', return_outputs: bool) -> 'StepResult':
        """An idle rank's outputs, when asked for and its pieces gave none: empty ones of the busy ranks' shape and
        dtype, as its predictions are."""
        if return_outputs and result.outputs is None and not self.counts[self.rank]:
            result = replace(result, outputs=engine.predict(inputs))
            set_mode(engine.replicas, True)
        return result

    @torch.no_grad()
    def average_buffers(self, buffers: list[torch.Tensor]) -> None:
        """Floating buffers averaged over the ranks that saw items, integer buffers from rank 0."""
        counts = self.counts or ()
        seen = sum(1 for count in counts if count)
        mine = 1.0 if counts and counts[self.rank] else 0.0
        self.phase = 'the synchronization of buffers'
        if len(counts) > 1:         # every rank joins: an idle one takes the mean of the others
            coalesced([buffer for buffer in buffers if buffer.is_floating_point()],
                      lambda flat: all_reduce(flat * mine) / seen)
        coalesced([buffer for buffer in buffers if not buffer.is_floating_point()], from_rank_0)
        self.phase = 'the all-reduce of the loss'

    def batch_mean(self, mean: float, count: int, run: RunContext | None) -> float:
        """The global batch's mean from every rank's shard mean and item count (one all-reduce; every rank joins,
        an idle one with nothing to add); a whole batch's own mean when ``run`` has no shard (a validation run gives
        each rank whole batches)."""
        if run is None or run.shard is None:
            return super().batch_mean(mean, count, run)
        return self.reduced_ratio(mean * count if count else 0.0, count)

    def predicted_loss(self, loss_fn: Callable, outputs: Any, targets: Sequence[torch.Tensor],
                       run: RunContext | None) -> float:
        """The global batch's loss from every rank's shard (one all-reduce of its sum and normalizer, or of its mean
        and item count for a loss flowpipe cannot place, every rank joins); a whole batch's own loss when ``run``
        has no shard (a validation run gives each rank whole batches)."""
        if run is None or run.shard is None:
            return super().predicted_loss(loss_fn, outputs, targets, run)
        form = normalized(loss_fn)
        rule, count = weighting(form), int(targets[0].shape[0]) if targets[0].dim() else 1
        if rule == ITEM_SHARES:
            return self.batch_mean(super().predicted_loss(loss_fn, outputs, targets, run), count, run)
        with torch.no_grad():
            total = float(form.sum(outputs, *targets)) if count else 0.0
        if rule == PLAIN_SUM:           # the sum over the ranks, divided once by 1
            return self.reduced_ratio(total, 1.0 if self.rank == 0 else 0.0)
        return self.reduced_ratio(total, float(form.normalizer(*targets)) if count else 0.0)

    def reduced_ratio(self, total: float, normalizer: float) -> float:
        """The sum over the ranks of ``total`` over the sum of ``normalizer`` (one all-reduce): NaN when every
        normalizer is 0."""
        totals = torch.tensor([total, normalizer], dtype=torch.float64, device=self.group_device)
        with distributed.collective('the all-reduce of a predicted loss'):
            kept(totals)
            dist.all_reduce(totals)
        total, normalizer = totals.tolist()
        return total / normalizer if normalizer else math.nan

    def predict(self, engine: 'Engine', inputs: Any, run: RunContext | None) -> Any:
        """This rank's outputs, micro-batch by micro-batch as in one process, from the network itself: without a
        collective, an empty shard giving empty outputs; under a ``lockstep`` synchronization a collective, the
        ranks running as many pieces each (``lockstep_predict``)."""
        if engine.gradient_sync.lockstep:
            return self.lockstep_predict(engine, inputs, run)
        batch = engine.prepare(inputs, ())
        set_mode(engine.replicas, False)
        pieces = split_batch(batch.size, 1, engine.plan.microbatch) if batch.size else (None,)
        return _forward(engine, batch, pieces)

    def lockstep_predict(self, engine: 'Engine', inputs: Any, run: RunContext | None) -> Any:
        """The ranks exchange their item counts and run as many pieces each (pieces without items on the ranks with
        fewer): every rank must call it alike, so a run (``run``) giving the ranks blocks of whole batches is
        refused."""
        if run is not None and run.whole_batches == 'split':
            raise ValueError("Expected Validate(..., shard=False) for a sharded model: a sharded forward is a "
                             "collective every rank joins, and shard=True gives the ranks blocks of batches that may "
                             "differ in number (a rank would wait for the others forever). Received: a prediction in "
                             "a run whose batches are split into blocks over the ranks (Validate(shard=True)).")
        batch = engine.prepare(inputs, ())
        counts, _ = self.exchange_counts(engine, inputs)
        if not sum(counts):
            counts = (1,)       # no items anywhere: one empty piece each, for outputs of the right shape
        with evaluating(engine.module):
            return _forward(engine, batch, self.pieces(engine.plan, batch.size, counts))

    def close(self) -> None:
        """Release the count exchange's own group (if any) while the job's group lives."""
        group, self.counts_group = self.counts_group, None
        if group is not None and dist.is_initialized():
            dist.destroy_process_group(group)


def _forward(engine: 'Engine', batch: BatchTensors, pieces: Sequence[Piece | None]) -> Any:
    """The network's outputs on ``pieces`` of ``batch``, without gradients, under the engine's autocast."""
    device = engine.devices[0]
    with torch.no_grad(), engine.precision.autocast(device):
        return concat([engine.module(*[move(t, device, batch.dtype, piece, engine.memory_format)
                                       for t in batch.inputs]) for piece in pieces])


def _shard_normalizer(form: Any, targets: Any) -> float | None:
    """This rank's loss normalizer, read to the host for the count exchange (a GPU target waits for the device
    here); ``None`` for a loss whose pieces are weighted by their share of the items."""
    if weighting(form) != NORMALIZER:
        return None
    tensors = as_batch(targets, 'targets')
    if not tensors or (tensors[0].dim() and not tensors[0].shape[0]):
        return 0.0                              # an idle rank counts nothing
    return float(checked_normalizer(form, form.normalizer(*tensors), 0))   # a shard may count 0; the sum may not
