"""Batch position generation shared by every index: epochs, shuffling, short and dropped tails.

Positions (0-based places in an index) are produced here; ``DatasetIndex`` turns them into sub-indices.
The stream of an epoch-based run is the concatenation of the epochs' orders: without ``drop_last`` a batch may
take the tail of one epoch and the head of the next, and only the very last batch can be short (batchflow's
batches). With ``whole_epochs`` every epoch ends with its own batch, short when the epoch's size is not a multiple
of the batch size (``torch.utils.data.DataLoader``'s and Keras's batches). With ``drop_last`` every epoch's
incomplete tail is dropped, so batches never cross epochs either.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

__all__ = ['PositionCursor', 'check_batch_args', 'gen_positions', 'make_rng', 'n_batches', 'shuffle_generator']

_EMPTY = np.empty(0, dtype=np.intp)


_RANDOM_STATES = (np.random.Generator, np.random.RandomState, np.random.SeedSequence, np.random.BitGenerator)


def make_rng(seed: Any = None) -> np.random.Generator | np.random.RandomState | None:
    """The random generator flowpipe shuffles with for ``seed`` (batchflow's ``make_rng``).

    Args:
        seed: ``False`` gives ``None``; ``None`` or ``True`` a generator with fresh entropy; an int the run's root
            seed, so ``make_rng(7).permutation(n)`` is the first epoch's order of ``gen_batch(..., shuffle=7)``
            (spawn key ``(0,)`` of ``SeedSequence(7)``); a ``SeedSequence`` or ``BitGenerator`` a generator over
            it; a ``Generator`` or a legacy ``RandomState`` is returned as it is.

    Raises:
        TypeError: any other type.
    """
    if seed is False:
        return None
    if seed is None or seed is True:
        return np.random.default_rng()
    if isinstance(seed, (np.random.Generator, np.random.RandomState)):
        return seed
    if isinstance(seed, (np.random.SeedSequence, np.random.BitGenerator)):
        return np.random.default_rng(seed)
    if isinstance(seed, (int, np.integer)):
        return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(0,)))
    raise TypeError("Expected seed to be a bool, an int, a numpy SeedSequence, BitGenerator, Generator or "
                    f"RandomState, or None. Received: seed={seed!r}")


def shuffle_generator(shuffle: Any, seed: Any = None) -> Any:
    """The generator that draws epoch permutations, or ``None`` when not shuffling.

    Args:
        shuffle: ``False``/``None`` keeps the order; ``True`` shuffles; an int shuffles and is the root seed; a
            numpy ``Generator``, ``RandomState``, ``SeedSequence`` or ``BitGenerator`` shuffles with it (see
            ``make_rng``).
        seed: the root seed (an int, ``None`` for fresh entropy), or a ready ``SeedSequence``/``Generator``
            used as is. It takes precedence over an int ``shuffle``.

    An int root follows the run's seed tree (spawn key ``(0,)`` of ``SeedSequence(root)``), so shuffling an
    index by hand with ``shuffle=7`` gives the same order as a pipeline run with ``shuffle=7``.
    """
    if shuffle is None or shuffle is False:
        return None
    if isinstance(shuffle, _RANDOM_STATES):
        return make_rng(shuffle)
    if not isinstance(shuffle, (bool, int, np.integer)):
        raise TypeError("Expected shuffle to be a bool, an int seed or a numpy random generator. "
                        f"Received: shuffle={shuffle!r}")
    if seed is None and not isinstance(shuffle, bool):
        seed = int(shuffle)
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.SeedSequence):
        return np.random.default_rng(seed)
    if seed is not None and not isinstance(seed, (int, np.integer)):
        raise TypeError("Expected seed to be an int, a numpy SeedSequence or Generator, or None. "
                        f"Received: seed={seed!r}")
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))


def check_batch_args(size: int, batch_size: Any, n_iters: Any, n_epochs: Any, drop_last: bool) -> None:
    """Raise a clear error for arguments no batch generation can honour."""
    if size == 0:
        raise ValueError("Expected a non-empty index to draw batches from. Received: an index of 0 items")
    for name, value in (('batch_size', batch_size), ('n_iters', n_iters), ('n_epochs', n_epochs)):
        if value is None and name != 'batch_size':
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"Expected {name} to be an int. Received: {name}={value!r}")
        if value < 1:
            raise ValueError(f"Expected {name} >= 1. Received: {name}={value!r}; pass a positive number")
    if n_iters is not None and n_epochs is not None:
        raise ValueError("Expected at most one of n_iters and n_epochs. "
                         f"Received: n_iters={n_iters!r}, n_epochs={n_epochs!r}; pass only one of them")
    if drop_last and batch_size > size:
        raise ValueError(f"Expected batch_size <= {size} (the number of items) with drop_last=True, otherwise "
                         f"every batch is dropped. Received: batch_size={batch_size!r}; use a smaller batch "
                         "or drop_last=False")


def n_batches(size: int, batch_size: int, n_iters: int | None = None, n_epochs: int | None = None,
              drop_last: bool = False, whole_epochs: bool = False) -> int | None:
    """How many batches a generation yields; ``None`` when it is infinite."""
    check_batch_args(size, batch_size, n_iters, n_epochs, drop_last)
    if n_iters is not None:
        return int(n_iters)
    if n_epochs is None:
        return None
    if drop_last:
        return int(n_epochs) * (size // batch_size)
    if whole_epochs:
        return int(n_epochs) * -(-size // batch_size)
    return -(-int(n_epochs) * size // batch_size)


def gen_positions(size: int, batch_size: int, rng: np.random.Generator | None = None, n_iters: int | None = None,
                  n_epochs: int | None = None, drop_last: bool = False,
                  whole_epochs: bool = False) -> Iterator[np.ndarray]:
    """Yield arrays of positions in ``range(size)``, one per batch, lazily (infinite without limits).

    Arguments are assumed checked by ``check_batch_args``; ``rng`` draws one permutation per epoch.
    """
    take = PositionCursor(size, rng, n_epochs, drop_last, whole_epochs).take
    if n_iters is None:
        positions = take(batch_size)
        while positions is not None:
            yield positions
            positions = take(batch_size)
        return
    for _ in range(n_iters):
        positions = take(batch_size)
        if positions is None:
            return
        yield positions


class PositionCursor:
    """A place in the stream of epoch orders from which batches of any size are taken, one call at a time.

    ``gen_positions`` takes batches of one size; ``DatasetIndex.next_batch`` may change the size from call to
    call and the stream goes on (as batchflow's ``next_batch`` does). Without ``drop_last`` a batch takes the
    tail of one epoch and the head of the next; with it, an epoch's tail shorter than the batch is dropped; with
    ``whole_epochs`` (and no ``drop_last``) that tail is a short batch of its own.
    """

    def __init__(self, size: int, rng: np.random.Generator | None, n_epochs: int | None, drop_last: bool,
                 whole_epochs: bool = False):
        self._epochs = _epoch_orders(size, rng, n_epochs)
        self._order, self._start, self._drop_last = _EMPTY, 0, drop_last
        self._whole_epochs = whole_epochs and not drop_last

    def _next_epoch(self) -> bool:
        order = next(self._epochs, None)
        if order is None:
            return False
        self._order, self._start = order, 0
        return True

    def take(self, batch_size: int) -> np.ndarray | None:
        """The positions of the next batch, ``None`` when the epochs are exhausted (a last batch may be short)."""
        start = self._start
        end = start + batch_size
        if end <= len(self._order):           # the common case: the batch lies within the current epoch
            self._start = end
            return self._order[start:end]
        if self._drop_last:
            while len(self._order) - self._start < batch_size:
                if not self._next_epoch():
                    return None
            start = self._start
            self._start += batch_size
            return self._order[start:self._start]
        if self._whole_epochs:
            if start == len(self._order):
                if not self._next_epoch():
                    return None
                return self.take(batch_size)
            self._start = len(self._order)
            return self._order[start:]
        parts, needed = [], batch_size
        while needed:
            if self._start == len(self._order) and not self._next_epoch():
                break
            start = self._start
            self._start = min(start + needed, len(self._order))
            parts.append(self._order[start:self._start])
            needed -= self._start - start
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _epoch_orders(size: int, rng: np.random.Generator | None, n_epochs: int | None) -> Iterator[np.ndarray]:
    ordered = np.arange(size)
    epoch = 0
    while n_epochs is None or epoch < n_epochs:
        yield ordered if rng is None else rng.permutation(size)
        epoch += 1
