"""Data parallel over the ranks of a job: one replica per process, one shard of each global batch.

The engine with three parts: ``placement.OneDevice`` (the rank's device), ``ranks.DataRanks`` (the run loop hands
every rank its contiguous shard of the global batch, ``flowpipe.execution``; the ranks exchange their item counts,
weigh their pieces by their share of the global batch and all-reduce the loss) and ``ddp.DdpAllReduce`` (the
gradients all-reduced by ``DistributedDataParallel`` in the last piece's backward). ``sharded.ShardedEngine`` is its
sibling: the same placement and batch part, with ``fsdp.FsdpReduceScatter`` instead.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from .. import distributed
from ..plan import DevicePlan
from ..precision import Precision
from .base import Engine, StepResult
from .ddp import DdpAllReduce
from .placement import OneDevice
from .ranks import DataRanks, counts_need_own_group

if TYPE_CHECKING:
    from .sync import GradientSync

__all__ = ['DistributedEngine', 'data_ranks', 'ranked_parts']

_counts_need_own_group = counts_need_own_group      # looked up here at every build (a test makes it always own)


def data_ranks(plan: DevicePlan, engine_name: str) -> DataRanks:
    """This rank's ``DataRanks``, its device checked against the job's backend and made current on a GPU; a clear
    error outside a distributed job."""
    distributed.init()
    if not dist.is_initialized():
        raise RuntimeError(f'Expected an initialized process group for the {engine_name} engine. Received: '
                           f'plan {plan.describe()!r} outside a distributed job. Start the processes with '
                           f'torchrun or flowpipe.parallel.launch.')
    device = plan.primary.device
    if dist.get_backend() == 'nccl' and device.type != 'cuda':
        raise ValueError(f"Expected a CUDA device with the NCCL backend. Received: device {plan.primary.name} "
                         f"in a NCCL process group. Use device='GPU:*' (each rank its GPU), or run the job on "
                         f"gloo (FLOWPIPE_DIST_BACKEND=gloo, or flowpipe.parallel.distributed.init('gloo')).")
    if device.type == 'cuda':
        torch.cuda.set_device(device)       # NCCL's collectives (and object gathers) run on the rank's GPU
    return DataRanks(device, _counts_need_own_group(dist.get_backend()))


def ranked_parts(engine: Engine, module: nn.Module, plan: DevicePlan, precision: Precision | None,
                 make_sync: 'type[GradientSync]', engine_name: str) -> None:
    """Build ``engine`` on the data-parallel ranks of a job: ``module`` on the rank's device (``OneDevice``), the
    batch part ``DataRanks`` and the gradient synchronization ``make_sync(ranks)``."""
    ranks = data_ranks(plan, engine_name)
    Engine.__init__(engine, plan, OneDevice(module, plan), make_sync(ranks), precision, ranks)


# The step's framing hooks of an engine on the ranks of a job, answered by its batch part (``DataRanks``): plain
# functions, bound as methods by each such engine (DDP's and FSDP's, siblings).

def ranked_step_context(engine: Engine) -> contextlib.AbstractContextManager:
    """The step counted and run under ``distributed.collective`` (``DataRanks.step_context``)."""
    return engine.ranks.step_context()


def ranked_before_step(engine: Engine, inputs: Any, targets: Any, form: Any = None) -> None:
    """The ranks' item counts and loss normalizers exchanged (``DataRanks.take_counts``), then told to the gradient
    synchronization (an idle rank changes how DDP reduces)."""
    engine.ranks.take_counts(engine, inputs, targets, form)
    engine.gradient_sync.counted()


def ranked_step_seed(engine: Engine, seed: int | None) -> int:
    """The step seed mixed with the shard's place in the global batch (``DataRanks.step_seed``)."""
    return engine.ranks.step_seed(Engine.step_seed(engine, seed), engine.plan)


def ranked_after_step(engine: Engine, inputs: Any, result: StepResult, return_outputs: bool) -> StepResult:
    """An idle rank's outputs, when asked for (``DataRanks.after_step``)."""
    return engine.ranks.after_step(engine, inputs, result, return_outputs)


def ranked_end_run(engine: Engine) -> None:
    """At the normal end of a sharded run (this engine the run's first to step): ``DataRanks.end_run``."""
    engine.ranks.end_run()


#: The global batch size of the last training step.
ranked_global_size = property(lambda engine: engine.ranks.global_size)
#: Every rank's item count in the last training step (``None`` before one).
ranked_counts = property(lambda engine: engine.ranks.counts)


class DistributedEngine(Engine):
    """Runs every step on ``module`` wrapped in ``DistributedDataParallel`` (``DdpAllReduce``), on the plan's one
    device, each rank on its shard of the global batch (``DataRanks``).

    Attributes:
        ddp: the ``DistributedDataParallel`` wrapper (``module`` is the network it wraps).
        counts: every rank's item count in the last training step (``None`` before one).
        global_size: the global batch size of the last training step.
    """

    step_context, before_step, step_seed = ranked_step_context, ranked_before_step, ranked_step_seed
    after_step, end_run = ranked_after_step, ranked_end_run
    counts, global_size = ranked_counts, ranked_global_size

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        ranked_parts(self, module, plan, precision, DdpAllReduce, 'distributed')

    @property
    def ddp(self) -> nn.parallel.DistributedDataParallel:
        return self.gradient_sync.ddp
