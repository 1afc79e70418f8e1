"""Sharded data parallel: one shard of the model per process, a sibling of ``distributed.DistributedEngine``.

The engine with the same placement (``placement.OneDevice``) and batch part (``ranks.DataRanks``) as the DDP engine,
and ``fsdp.FsdpReduceScatter`` as its gradient synchronization: the module sharded with torch's FSDP2, the
gradients summed by a reduce-scatter, every rank running as many pieces as any (``lockstep``). Prediction is
collective too: every rank must call it alike (for each global batch of a sharded run, or the whole set on every
rank).
"""
from __future__ import annotations

from typing import Any

from torch import nn

from ..plan import DevicePlan
from ..precision import Precision
from .distributed import (ranked_after_step, ranked_before_step, ranked_counts, ranked_end_run, ranked_global_size,
                          ranked_parts, ranked_step_context, ranked_step_seed)
from .base import Engine
from .fsdp import FsdpReduceScatter, check_tied, sharding_units, storage_bytes

__all__ = ['ShardedEngine', 'check_tied', 'sharding_units', 'storage_bytes']


class ShardedEngine(Engine):
    """Runs every step on ``module`` sharded with FSDP2 over the ranks of the job (``FsdpReduceScatter``).

    Saving: ``state_dict()`` and ``optimizer_state_dict()`` gather the whole state on rank 0 (every rank calls
    them: ``collective_state``), in the layout of one process, so a model file saved here loads in one process and
    on any number of ranks; the ``load_`` hooks take the whole state on every rank and keep each rank's shard.

    Attributes:
        mesh: the ``DeviceMesh`` of the shards: 1-D, or ``(replicate, shard)`` for ``'hybrid'``.
        skeleton: the network before sharding, parameters on the ``meta`` device (``sharded_state.skeleton``).
        counts, global_size: as ``DistributedEngine``'s.
    """

    step_context, before_step, step_seed = ranked_step_context, ranked_before_step, ranked_step_seed
    after_step, end_run = ranked_after_step, ranked_end_run
    counts, global_size = ranked_counts, ranked_global_size

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        ranked_parts(self, module, plan, precision, FsdpReduceScatter, 'distributed')

    @property
    def mesh(self) -> Any:
        return self.gradient_sync.mesh

    @property
    def skeleton(self) -> nn.Module:
        return self.gradient_sync.skeleton

    def rank_bytes(self) -> dict[str, int | None]:
        """Bytes this rank holds of parameters, gradients and optimizer state (``FsdpReduceScatter.rank_bytes``)."""
        return self.gradient_sync.rank_bytes()
