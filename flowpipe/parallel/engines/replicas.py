"""Data parallel in one process: N replicas of one module, each batch split across them.

The engine with two parts: ``placement.Replicas`` (deep copies of the module on the plan's devices, each replica
on its own thread and, on a GPU, its own stream) and ``sync.ReplicaSum``. A step: every replica runs forward and
backward on its pieces (one per micro-batch chunk), concurrently, each piece's loss weighted by its share of the
batch; the replicas' gradients are summed onto the primary; the optimizer steps once; parameters are copied back to
the replicas and floating buffers (BatchNorm running statistics) are averaged over the replicas that saw data, then
copied back. Not ``nn.DataParallel``: the replicas persist between steps and nothing is re-scattered but the data.
"""
from __future__ import annotations

from torch import nn

from ..plan import DevicePlan
from ..precision import Precision
from .base import Engine
from .placement import Replicas
from .sync import ReplicaSum
from .workers import ReplicaWorkers

__all__ = ['ReplicaEngine']


class ReplicaEngine(Engine):
    """Replicas on ``plan.devices`` (``Replicas``), their gradients summed onto the primary (``ReplicaSum``).

    Call ``close()`` (or use the engine as a context manager) to stop the replicas' threads.
    """

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        super().__init__(plan, Replicas(module, plan), ReplicaSum(), precision)

    @property
    def _workers(self) -> ReplicaWorkers:
        """The placement's worker threads (``Replicas.workers``)."""
        return self.placement.workers
