"""Batch position generation shared by every index: epochs, shuffling, short and dropped tails.

Positions (0-based places in an index) are produced here; ``DatasetIndex`` turns them into sub-indices.
The stream of an epoch-based run is the concatenation of the epochs' orders: without ``drop_last`` a batch may
take the tail of one epoch and the head of the next, and only the very last batch can be short. With
``drop_last`` every epoch's incomplete tail is dropped, so batches never cross epochs.
"""
from __future__ import annotations

from typing import Any, Iterator

import numpy as np

__all__ = ['check_batch_args', 'gen_positions', 'n_batches', 'shuffle_generator']

_EMPTY = np.empty(0, dtype=np.intp)


def shuffle_generator(shuffle: Any, seed: Any = None) -> np.random.Generator | None:
    """The generator that draws epoch permutations, or ``None`` when not shuffling.

    Args:
        shuffle: ``False``/``None`` keeps the order; ``True`` shuffles; an int shuffles and is the root seed.
        seed: the root seed (an int, ``None`` for fresh entropy), or a ready ``SeedSequence``/``Generator``
            used as is. It takes precedence over an int ``shuffle``.

    An int root follows the run's seed tree (spawn key ``(0,)`` of ``SeedSequence(root)``), so shuffling an
    index by hand with ``shuffle=7`` gives the same order as a pipeline run with ``shuffle=7``.
    """
    if shuffle is None or shuffle is False:
        return None
    if not isinstance(shuffle, (bool, int, np.integer)):
        raise TypeError(f"Expected shuffle to be a bool or an int seed. Received: shuffle={shuffle!r}")
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
              drop_last: bool = False) -> int | None:
    """How many batches a generation yields; ``None`` when it is infinite."""
    check_batch_args(size, batch_size, n_iters, n_epochs, drop_last)
    if n_iters is not None:
        return int(n_iters)
    if n_epochs is None:
        return None
    if drop_last:
        return int(n_epochs) * (size // batch_size)
    return -(-int(n_epochs) * size // batch_size)


def gen_positions(size: int, batch_size: int, rng: np.random.Generator | None = None, n_iters: int | None = None,
                  n_epochs: int | None = None, drop_last: bool = False) -> Iterator[np.ndarray]:
    """Yield arrays of positions in ``range(size)``, one per batch, lazily (infinite without limits).

    Arguments are assumed checked by ``check_batch_args``; ``rng`` draws one permutation per epoch.
    """
    produced = 0
    epochs = _epoch_orders(size, rng, n_epochs)
    chunks = _chunks_dropping_tails(epochs, batch_size) if drop_last else _chunks_across_epochs(epochs, batch_size)
    for positions in chunks:
        yield positions
        produced += 1
        if n_iters is not None and produced >= n_iters:
            return


def _epoch_orders(size: int, rng: np.random.Generator | None, n_epochs: int | None) -> Iterator[np.ndarray]:
    ordered = np.arange(size)
    epoch = 0
    while n_epochs is None or epoch < n_epochs:
        yield ordered if rng is None else rng.permutation(size)
        epoch += 1


def _chunks_dropping_tails(epochs: Iterator[np.ndarray], batch_size: int) -> Iterator[np.ndarray]:
    for order in epochs:
        for start in range(0, len(order) - batch_size + 1, batch_size):
            yield order[start:start + batch_size]


def _chunks_across_epochs(epochs: Iterator[np.ndarray], batch_size: int) -> Iterator[np.ndarray]:
    carry = _EMPTY
    for order in epochs:
        start = 0
        if len(carry):
            start = batch_size - len(carry)
            head = np.concatenate((carry, order[:start]))
            if len(head) < batch_size:
                # The batch is larger than an epoch: keep filling it from the next one.
                carry = head
                continue
            yield head
        while start + batch_size <= len(order):
            yield order[start:start + batch_size]
            start += batch_size
        carry = order[start:]
    if len(carry):
        yield carry
