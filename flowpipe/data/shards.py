"""Sharding global batches over the ranks of a distributed job (see ``flowpipe.parallel.distributed``).

Every rank draws the same global batches (the same run seed, rank 0's when the run draws it) and keeps its
contiguous shard of each: balanced sizes, the first ranks taking the extra items, an empty shard for the last
ranks when a batch has fewer items than the world (``balanced_sizes``: the one copy of that rule, which
``flowpipe.parallel.split`` uses for replicas too, kept here so that sharding a run needs no torch). Every rank
so runs the same number of iterations.
The shard's sub-index carries ``shard``: where it lies in its global batch, for ``R(...)`` draws and
per-item seeds that must not depend on the world size, and which global batch of the run it is cut from. A model
step runs under ``stepping(batch)``; the model reads where its step lies (``run_context``: the shard, how the run
gives out whole batches) and passes it to its engine's call, so the distributed engine can tell, at its exchange of
item counts, that every rank is on the same global batch. The engines read no context variable themselves.
"""
from __future__ import annotations

import contextvars
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

__all__ = ['NO_RUN', 'WHOLE_BATCHES', 'RunContext', 'Shard', 'balanced_bounds', 'balanced_sizes', 'current_shard',
           'end_sharded_run', 'run_context', 'run_mesh', 'run_world', 'shard_batches', 'shard_of', 'stepping']

_STEPPING: contextvars.ContextVar = contextvars.ContextVar('flowpipe_stepping', default=None)
#: How runs started in this context give out batches in a distributed job: ``None`` (each batch sharded over the
#: ranks), ``'split'`` (contiguous blocks of whole batches, rank by rank) or ``'every'`` (every rank every batch);
#: set by ``flowpipe.execution.run.whole_batches``.
WHOLE_BATCHES: contextvars.ContextVar = contextvars.ContextVar('flowpipe_whole_batches', default=None)


@dataclass(frozen=True)
class Shard:
    """Items ``start:stop`` of a global batch of ``size`` items, the part of rank ``rank``; ``batch`` is the global
    batch's position in the run (from 0), ``-1`` when unknown."""

    start: int
    stop: int
    size: int
    rank: int = 0
    batch: int = -1
    #: the engines that stepped in the run, in the order of their first step (shared by the run's shards)
    stepped: list | None = field(default=None, compare=False, repr=False)
    #: what the ranks agree on after the batch, carried by the engine's exchange of item counts
    #: (``flowpipe.execution.signals.Agreement``, shared by the run's shards; ``None``: nothing to agree on)
    agreement: Any = field(default=None, compare=False, repr=False)
    #: what the run has said once (the layout-dependent ``R(...)`` draws warned of; shared by the run's shards)
    said: set | None = field(default=None, compare=False, repr=False)

    def take(self, values: Any) -> Any:
        """The shard's part of per-item values drawn for the whole global batch."""
        return values[self.start:self.stop]


def balanced_sizes(total: int, parts: int) -> tuple[int, ...]:
    """Sizes of ``parts`` contiguous parts of ``total`` items: they differ by at most one, the first parts taking
    the extra items."""
    base, extra = divmod(total, parts)
    return tuple(base + (part < extra) for part in range(parts))


def balanced_bounds(total: int, parts: int, part: int) -> tuple[int, int]:
    """Items ``start, stop`` of part ``part`` of ``balanced_sizes(total, parts)``."""
    base, extra = divmod(total, parts)
    start = part * base + min(part, extra)
    return start, start + base + (part < extra)


def run_world() -> Any:
    """This process's ``World`` when it belongs to a distributed job (the group initialized), else ``None``.

    Cheap and torch-free outside a job: torch is imported only when ``WORLD_SIZE`` > 1 or torch is loaded.
    """
    if os.environ.get('WORLD_SIZE', '').strip() in ('', '0', '1') and 'torch.distributed' not in sys.modules:
        return None
    from ..parallel import distributed
    return distributed.setup()


def run_mesh(world: Any, stages: int | None = None) -> Any:
    """The mesh of a distributed run (``flowpipe.parallel.mesh``): the world split into pipelines of ``stages``
    ranks (``None``: one rank each); its ``data_rank`` and ``data_size`` say which part of every batch to read."""
    from ..parallel.mesh import make_mesh
    return make_mesh(world, pipeline=stages)


def shard_batches(indices: Iterator[Any], rank: int, size: int, stepped: list | None = None,
                  agreement: Any = None) -> Iterator[Any]:
    """Each global batch's sub-index cut down to rank ``rank``'s shard (see the module docstring); ``stepped``
    collects the engines that step on the shards, ``agreement`` what the engine's exchange carries for the run."""
    said: set = set()
    for position, index in enumerate(indices):
        total = len(index)
        start, stop = balanced_bounds(total, size, rank)
        shard = index.subset(np.arange(start, stop))
        shard.shard = Shard(start, stop, total, rank, position, stepped, agreement, said)
        yield shard


def end_sharded_run(stepped: list, models: Any) -> None:
    """At the normal end of a sharded run every rank takes part in one exchange of the run's end: the run's first
    engine to step here (``DistributedEngine.end_run``); on a rank that stepped none (it skipped every batch the
    others trained on), the first of the built ``models`` (a pipeline's model store, by name) on a distributed
    engine, or, with a model not built yet, the job's group (``run_end``), as the others build theirs. A rank
    still training then fails naming the rank that ended, and so does that rank, instead of waiting for the
    timeout."""
    engines = list(stepped)
    with models.lock:
        stored = [model for _, model in sorted(models.items(), key=lambda item: item[0])]
    if not engines:
        engines = [model.engine for model in stored if hasattr(getattr(model, 'engine', None), 'end_run')]
    if engines:
        engines[0].end_run()
    elif any(getattr(model, 'engine', None) is None for model in stored):
        from ..parallel.run_end import RUN_ENDED, exchange_position
        exchange_position(RUN_ENDED, 'the end of the run')


def shard_of(batch: Any) -> Shard | None:
    """The ``Shard`` a batch (or index) is in a distributed run, ``None`` for a whole batch."""
    index = getattr(batch, 'index', batch)
    return getattr(index, 'shard', None)


class stepping:  # noqa: N801 - used as a function: ``with stepping(batch):``
    """Mark the block as a model step on ``batch`` (for ``current_shard``, in this thread); nothing to mark
    outside a distributed run (a slotted class, not a generator: it runs at every model step)."""
    __slots__ = ('_shard', '_token')

    def __init__(self, batch: Any):
        self._shard, self._token = shard_of(batch), None

    def __enter__(self) -> None:
        if self._shard is not None:
            self._token = _STEPPING.set(self._shard)

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            _STEPPING.reset(self._token)


def current_shard() -> Shard | None:
    """The ``Shard`` of the batch the model step running in this thread is on, ``None`` outside one."""
    return _STEPPING.get()


@dataclass(frozen=True)
class RunContext:
    """Where a model step lies in its run, as an engine's call takes it (``run=``): ``shard``, the ``Shard`` of the
    global batch it steps on (``None``: a whole batch, or no run); ``whole_batches``, how the run gives out whole
    batches in a distributed job (``WHOLE_BATCHES``: ``None``, ``'split'`` or ``'every'``)."""

    shard: Shard | None = None
    whole_batches: str | None = None


#: A step outside any run (an engine called directly): a whole batch, runs giving out shards.
NO_RUN = RunContext()


def run_context() -> RunContext:
    """The ``RunContext`` of the model step running in this thread (``NO_RUN`` outside a run): what the model
    passes to its engine."""
    shard, whole = _STEPPING.get(), WHOLE_BATCHES.get()
    return NO_RUN if shard is None and whole is None else RunContext(shard, whole)
