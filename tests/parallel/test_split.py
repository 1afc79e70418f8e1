"""Split rules: balanced and weighted shards, micro-batch chunks, pieces and their loss weights."""
import random
from fractions import Fraction

import pytest

from flowpipe.parallel.split import chunk_sizes, shard_sizes, split_batch


@pytest.mark.parametrize('batch_size', range(0, 23))
@pytest.mark.parametrize('num_shards', [1, 2, 3, 4, 7])
def test_balanced_shards_differ_by_at_most_one(batch_size, num_shards):
    sizes = shard_sizes(batch_size, num_shards)
    assert len(sizes) == num_shards and sum(sizes) == batch_size
    assert max(sizes) - min(sizes) <= 1
    assert list(sizes) == sorted(sizes, reverse=True)


def test_examples_of_balanced_shards():
    assert shard_sizes(10, 4) == (3, 3, 2, 2)
    assert shard_sizes(2, 4) == (1, 1, 0, 0)
    assert shard_sizes(12, 3) == (4, 4, 4)


def test_weighted_shards_use_largest_remainder_with_ties_to_the_earlier_shard():
    assert shard_sizes(10, 3, [2, 1, 1]) == (5, 3, 2)
    assert shard_sizes(64, 2, [3, 1]) == (48, 16)
    assert shard_sizes(7, 2, [1, 1]) == (4, 3)


def test_weighted_shards_are_proportional_and_sum_to_the_batch():
    rng = random.Random(0)
    for _ in range(200):
        count = rng.randint(1, 6)
        weights = [rng.uniform(0.1, 5) for _ in range(count)]
        batch_size = rng.randint(0, 100)
        sizes = shard_sizes(batch_size, count, weights)
        assert sum(sizes) == batch_size
        total = sum(Fraction(w) for w in weights)
        assert all(abs(size - batch_size * Fraction(w) / total) < 1 for size, w in zip(sizes, weights))


def test_bad_shard_arguments():
    with pytest.raises(ValueError, match='one weight per shard'):
        shard_sizes(10, 2, [1, 2, 3])
    with pytest.raises(ValueError, match='at least one shard'):
        shard_sizes(10, 0)
    with pytest.raises(ValueError, match='non-negative batch_size'):
        shard_sizes(-1, 2)
    with pytest.raises(TypeError, match='batch_size as an int'):
        shard_sizes(2.0, 2)


@pytest.mark.parametrize('batch_size, microbatch, expected', [
    (10, 3, (3, 3, 3, 1)), (9, 3, (3, 3, 3)), (2, 5, (2,)), (7, None, (7,)), (7, False, (7,)), (5, 1, (1,) * 5),
    (64, 16, (16,) * 4), (64, 8, (8,) * 8),
])
def test_chunks_keep_every_item(batch_size, microbatch, expected):
    assert chunk_sizes(batch_size, microbatch) == expected


@pytest.mark.parametrize('batch_size', [1, 2, 5, 12, 13])
@pytest.mark.parametrize('replicas', [1, 2, 3, 4])
@pytest.mark.parametrize('microbatch', [None, 1, 4, 5])
def test_pieces_cover_the_batch_in_order_with_exact_weights(batch_size, replicas, microbatch):
    pieces = split_batch(batch_size, replicas, microbatch)
    assert pieces[0].start == 0 and pieces[-1].stop == batch_size
    assert all(a.stop == b.start for a, b in zip(pieces, pieces[1:]))
    assert all(piece.size > 0 and piece.weight == piece.size / batch_size for piece in pieces)
    assert sum(piece.weight for piece in pieces) == pytest.approx(1.0, rel=1e-15)
    assert [p.chunk for p in pieces] == sorted(p.chunk for p in pieces)


def test_each_chunk_is_split_across_replicas():
    pieces = split_batch(10, 3, 4)
    assert [(p.chunk, p.replica, p.size) for p in pieces] == [
        (0, 0, 2), (0, 1, 1), (0, 2, 1), (1, 0, 2), (1, 1, 1), (1, 2, 1), (2, 0, 1), (2, 1, 1)]


def test_a_batch_smaller_than_the_replicas_leaves_some_idle():
    pieces = split_batch(2, 4)
    assert [(p.replica, p.start, p.stop) for p in pieces] == [(0, 0, 1), (1, 1, 2)]


def test_an_empty_batch_is_rejected():
    with pytest.raises(ValueError, match='non-empty batch'):
        split_batch(0, 2)


@pytest.mark.parametrize('total', range(0, 12))
@pytest.mark.parametrize('parts', [1, 2, 3, 5])
def test_the_replicas_and_the_ranks_of_a_run_share_one_torch_free_balanced_rule(total, parts):
    import subprocess
    import sys

    from flowpipe.data.shards import balanced_bounds, balanced_sizes
    assert shard_sizes(total, parts) == balanced_sizes(total, parts)
    bounds = [balanced_bounds(total, parts, part) for part in range(parts)]
    assert [stop - start for start, stop in bounds] == list(balanced_sizes(total, parts))
    assert [start for start, _ in bounds] == [sum(balanced_sizes(total, parts)[:part]) for part in range(parts)]
    if total == 0 and parts == 1:
        code = 'import sys, flowpipe.data.shards; assert "torch" not in sys.modules'
        subprocess.run([sys.executable, '-c', code], check=True)
