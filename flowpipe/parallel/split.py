"""Split rules: how a batch becomes micro-batch chunks and per-device shards (pure functions).

A batch of ``n`` items is cut into chunks of ``k`` items (the last one shorter, never dropped or padded); each
chunk is cut into one contiguous shard per device (balanced, or proportional to ``device_weights``). Every
non-empty piece carries the weight ``piece_size / n``: the weighted sum of mean-reduced piece losses is the
full-batch loss, so the summed gradients are the full-batch gradient.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from ..data.shards import balanced_sizes

__all__ = ['Piece', 'chunk_sizes', 'shard_sizes', 'split_batch']


@dataclass(frozen=True)
class Piece:
    """Items ``start:stop`` of the batch, computed by replica ``replica`` in micro-batch ``chunk``."""

    chunk: int
    replica: int
    start: int
    stop: int
    weight: float

    @property
    def size(self) -> int:
        """Number of items in the piece."""
        return self.stop - self.start


def _check_size(size: int, name: str) -> None:
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f'Expected {name} as an int. Received: {size!r} of type {type(size).__name__}.')
    if size < 0:
        raise ValueError(f'Expected a non-negative {name}. Received: {size!r}.')


def shard_sizes(batch_size: int, num_shards: int, weights: Sequence[float] | None = None) -> tuple[int, ...]:
    """Sizes of ``num_shards`` contiguous shards of a batch, summing to ``batch_size``.

    Without weights the sizes differ by at most one, the first shards taking the extra items. With weights the
    sizes are proportional to them by the largest-remainder rule (ties go to the earlier shard), computed in
    exact rational arithmetic so the result does not depend on float rounding.
    """
    _check_size(batch_size, 'batch_size')
    if num_shards < 1:
        raise ValueError(f'Expected at least one shard. Received: num_shards={num_shards!r}.')
    if weights is None:
        return balanced_sizes(batch_size, num_shards)
    if len(weights) != num_shards:
        raise ValueError(f'Expected one weight per shard ({num_shards}). Received: {list(weights)!r}.')
    exact = [Fraction(w) for w in weights]
    total = sum(exact)
    quotas = [batch_size * w / total for w in exact]
    sizes = [int(q) for q in quotas]
    by_remainder = sorted(range(num_shards), key=lambda i: (-(quotas[i] - sizes[i]), i))
    for i in by_remainder[:batch_size - sum(sizes)]:
        sizes[i] += 1
    return tuple(sizes)


def chunk_sizes(batch_size: int, microbatch: int | None) -> tuple[int, ...]:
    """Sizes of the micro-batch chunks: ``microbatch`` items each, the last one shorter; one chunk when off."""
    _check_size(batch_size, 'batch_size')
    if not microbatch or microbatch >= batch_size:
        return (batch_size,)
    full, rest = divmod(batch_size, microbatch)
    return (microbatch,) * full + ((rest,) if rest else ())


def split_batch(batch_size: int, num_replicas: int = 1, microbatch: int | None = None,
                weights: Sequence[float] | None = None) -> tuple[Piece, ...]:
    """All non-empty pieces of a batch in batch order: chunk by chunk, shard by shard within a chunk.

    Raises:
        ValueError: ``batch_size`` is zero (there is nothing to weight the loss by).
    """
    _check_size(batch_size, 'batch_size')
    if batch_size == 0:
        raise ValueError('Expected a non-empty batch. Received: batch_size=0.')
    pieces, start = [], 0
    for chunk, size in enumerate(chunk_sizes(batch_size, microbatch)):
        for replica, shard in enumerate(shard_sizes(size, num_replicas, weights)):
            if shard:
                pieces.append(Piece(chunk, replica, start, start + shard, shard / batch_size))
            start += shard
    return tuple(pieces)
