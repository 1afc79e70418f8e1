"""DDP all-reduce: the gradient synchronization of data parallel over the ranks of a job, a
``DistributedDataParallel`` wrapper around the rank's one replica (``ranks.DataRanks`` cuts the global batch).

Each piece's weighted loss runs its backward through the DDP module; DDP's gradient all-reduce is skipped
(``no_sync``) until the last piece; it averages over the ``W`` ranks, so each backward runs on the weighted loss
times ``W`` (``backward_factor``) and every rank holds the gradient of the whole global batch. DDP's own all-reduce
runs in C++: a Python communication hook would leave Python objects for gloo's threads to release, which aborts a
process whose interpreter is exiting. When a rank is idle (a global batch smaller than the world), every rank skips
DDP's all-reduce and sums the gradients with one explicit all-reduce (the idle rank contributes zeros), so no rank
waits for a backward that never comes. After the step, floating buffers (BatchNorm statistics) are averaged over the
ranks that saw items, integer ones taken from rank 0.
"""
from __future__ import annotations

import contextlib
import inspect
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...torchutils import NO_CONTEXT
from .. import distributed
from .collectives import all_reduce, coalesced, from_rank_0
from .sync import GradientSync

if TYPE_CHECKING:
    from .placement import Placement
    from .ranks import DataRanks

__all__ = ['DdpAllReduce']

# Buffers are synchronized by the engine after each step (an idle rank runs no forward, so DDP's per-forward
# buffer broadcast would wait for it forever); the keyword changed name in recent torch versions.
_NO_BUFFER_SYNC = ({'forward_sync_buffers': False}
                   if 'forward_sync_buffers' in inspect.signature(nn.parallel.DistributedDataParallel).parameters
                   else {'broadcast_buffers': False})


class DdpAllReduce(GradientSync):
    """DDP's averaging all-reduce in the last piece's backward, an explicit sum when a rank is idle (see the module
    docstring); ``ranks``: the job's data-parallel ranks, whose item counts decide which.

    Attributes:
        ddp: the ``DistributedDataParallel`` wrapper of the rank's module.
    """

    def __init__(self, ranks: 'DataRanks'):
        self.ranks = ranks
        self._idle = False

    def wrap(self, placement: 'Placement', plan: Any) -> list[nn.Module]:
        """The rank's module wrapped in ``DistributedDataParallel``."""
        module, device = placement.module, placement.devices[0]
        self.module = module
        self.ddp = nn.parallel.DistributedDataParallel(
            module, device_ids=[device] if device.type == 'cuda' else None, **_NO_BUFFER_SYNC)
        return [self.ddp]

    def counted(self) -> None:
        """After the ranks' item counts are exchanged: whether a rank is idle decides how gradients are reduced."""
        counts = self.ranks.counts
        self._idle = min(counts) == 0
        # DDP's own all-reduce (C++, no Python callback on gloo's threads) averages over the ranks; a step with an
        # idle rank sums its gradients itself (reduce)
        self.backward_factor = 1.0 if self._idle else float(len(counts))
        if not counts[self.ranks.rank]:
            # DDP rebuilds its gradient buckets (a broadcast) in the first forward after its first synchronized
            # backward; a rank that runs no forward joins it here, as torch's own join hook does
            self.ddp.reducer._rebuild_buckets()

    def backward_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """DDP's all-reduce runs in the backward of the last piece only, and not at all when a rank is idle."""
        if last and not self._idle:
            return NO_CONTEXT
        return self.ddp.no_sync()

    @torch.no_grad()
    def reduce(self, active: tuple[int, ...]) -> None:
        """With an idle rank: one explicit all-reduce (sum) of every gradient, zeros where a rank has none."""
        if not self._idle:
            return
        self.ranks.phase = 'the gradient all-reduce of a step with an idle rank'
        params = [param for param in self.module.parameters() if param.requires_grad]
        for param in params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        coalesced([param.grad for param in params], all_reduce)

    def broadcast(self, active: tuple[int, ...]) -> None:
        """Floating buffers averaged over the ranks that saw items, integer buffers from rank 0."""
        self.ranks.average_buffers(list(self.module.buffers()))

    @torch.no_grad()
    def sync(self) -> None:
        """Every rank takes rank 0's parameters and buffers (after loading weights)."""
        with distributed.collective("the broadcast of rank 0's weights"):
            coalesced([*self.module.parameters(), *self.module.buffers()], from_rank_0)
