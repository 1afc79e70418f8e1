"""Sharding global batches over the ranks of a distributed job (see ``flowpipe.parallel.distributed``).

Every rank draws the same global batches (the same run seed, broadcast from rank 0 when the run draws it) and
keeps its contiguous shard of each: balanced sizes, the first ranks taking the extra items, an empty shard for
the last ranks when a batch has fewer items than the world (``balanced_sizes``: the one copy of that rule, which
``flowpipe.parallel.split`` uses for replicas too, kept here so that sharding a run needs no torch). Every rank so runs the same number of iterations.
The shard's sub-index carries ``shard``: where it lies in its global batch, for ``R(...)`` draws and
per-item seeds that must not depend on the world size.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

__all__ = ['Shard', 'balanced_bounds', 'balanced_sizes', 'run_world', 'shard_batches', 'shard_of']


@dataclass(frozen=True)
class Shard:
    """Items ``start:stop`` of a global batch of ``size`` items, the part of rank ``rank``."""

    start: int
    stop: int
    size: int
    rank: int = 0

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


def shard_batches(indices: Iterator[Any], rank: int, size: int) -> Iterator[Any]:
    """Each global batch's sub-index cut down to rank ``rank``'s shard (see the module docstring)."""
    for index in indices:
        total = len(index)
        start, stop = balanced_bounds(total, size, rank)
        shard = index.subset(np.arange(start, stop))
        shard.shard = Shard(start, stop, total, rank)
        yield shard


def shard_of(batch: Any) -> Shard | None:
    """The ``Shard`` a batch (or index) is in a distributed run, ``None`` for a whole batch."""
    index = getattr(batch, 'index', batch)
    return getattr(index, 'shard', None)
