import threading

import numpy as np
import pytest

from flowpipe.batch import Batch
from flowpipe.batch.parallel import accepts_rng, collect, run_items
from flowpipe.expr import PerItem


class PairBatch(Batch):
    components = ('images', 'labels')


def make_batch(size=6, seed=3):
    batch = PairBatch(size, data=(np.arange(size * 2, dtype=float).reshape(size, 2), np.arange(size)))
    batch.seed = seed
    return batch


def test_maps_over_items_in_place():
    batch = make_batch().apply_parallel(lambda item: item + 1)
    assert batch.images.shape == (6, 2) and batch.images[0, 0] == 1


def test_dst_adds_component_and_keeps_src():
    batch = make_batch().apply_parallel(lambda item: item.sum(), src='images', dst='sums')
    assert list(batch.sums) == [1, 5, 9, 13, 17, 21]
    assert batch.images[0, 1] == 1
    assert 'sums' in batch.components


def test_extra_args_and_kwargs():
    batch = make_batch().apply_parallel(lambda item, a, b=0: item * a + b, 'labels', None, None, 10, b=1)
    assert list(batch.labels) == [1, 11, 21, 31, 41, 51]


def test_tuple_src_gives_one_tuple_per_item():
    batch = make_batch().apply_parallel(lambda item: (item[0][0], item[1] * 2), src=('images', 'labels'),
                                        dst=['first', 'twice'])
    assert list(batch.first) == [0, 2, 4, 6, 8, 10]
    assert list(batch.twice) == [0, 2, 4, 6, 8, 10]
    paired = make_batch(2).apply_parallel(lambda item: item[1], src=('images', 'labels'), dst='label_copy')
    assert list(paired.label_copy) == [0, 1]


def test_list_src_transforms_each_component_alike():
    batch = make_batch(40)
    batch.add_components('copy', batch.labels.copy())
    batch.apply_parallel(lambda x, rng: x + rng.integers(1000), src=['labels', 'copy'], p=0.5)
    assert np.array_equal(batch.labels, batch.copy)
    assert 0 < (batch.labels != np.arange(40)).sum() < 40
    twice = make_batch(3).apply_parallel(lambda x: x * 2, src=['labels', 'labels'], dst=['a', 'b'])
    assert list(twice.a) == list(twice.b) == [0, 2, 4]
    with pytest.raises(ValueError, match='list dst as long'):
        make_batch().apply_parallel(lambda x: x, src=['labels', 'images'], dst='out')


def test_several_dst_need_tuples():
    with pytest.raises(ValueError, match='return 2 values per item'):
        make_batch().apply_parallel(lambda label: label, src='labels', dst=['a', 'b'])


def test_per_item_arguments():
    batch = make_batch(3).apply_parallel(lambda label, k, m=1: label + k * m, 'labels', 'out', None,
                                         PerItem([100, 200, 300]), m=PerItem([1, 2, 3]))
    assert list(batch.out) == [100, 401, 902]


def test_per_item_argument_of_wrong_length():
    with pytest.raises(ValueError, match='3 values, one per batch item. Received 2'):
        make_batch(3).apply_parallel(lambda label, k: label, 'labels', None, None, PerItem([1, 2]))


def test_probability_is_reproducible_and_copies_the_rest():
    def run(seed):
        return make_batch(50, seed).apply_parallel(lambda label: -1, src='labels', dst='out', p=0.5).out

    first = run(1)
    assert np.array_equal(first, run(1)) and not np.array_equal(first, run(2))
    changed = first == -1
    assert 0 < changed.sum() < 50
    assert np.array_equal(first[~changed], np.arange(50)[~changed])


def test_probability_bounds():
    assert list(make_batch().apply_parallel(lambda x: -1, src='labels', p=0).labels) == list(range(6))
    assert list(make_batch().apply_parallel(lambda x: -1, src='labels', p=1).labels) == [-1] * 6
    with pytest.raises(ValueError, match='p=1.5'):
        make_batch().apply_parallel(lambda x: x, src='labels', p=1.5)


def test_rng_per_item_is_deterministic_and_independent():
    def noisy(label, rng):
        return rng.random()

    first = make_batch(seed=7).apply_parallel(noisy, src='labels', dst='noise').noise
    second = make_batch(seed=7).apply_parallel(noisy, src='labels', dst='noise', workers=3).noise
    assert np.array_equal(first, second)
    assert len(set(first)) == 6
    assert not np.array_equal(first, make_batch(seed=8).apply_parallel(noisy, src='labels', dst='noise').noise)


def test_explicit_rng_kwarg_is_kept():
    rng = np.random.default_rng(0)
    batch = make_batch().apply_parallel(lambda label, rng: rng is not None, src='labels', dst='ok', rng=rng)
    assert batch.ok.all()


def test_workers_give_same_result_and_leave_no_thread():
    before = threading.active_count()
    batch = make_batch().apply_parallel(lambda item: item * 3, workers=4)
    assert batch.images[5, 1] == 33
    assert threading.active_count() == before


def test_worker_exception_propagates():
    def fail(label):
        if label == 3:
            raise RuntimeError('item 3 failed')
        return label

    with pytest.raises(RuntimeError, match='item 3 failed'):
        make_batch().apply_parallel(fail, src='labels', workers=2)


def test_ragged_results_become_object_array():
    batch = make_batch(3).apply_parallel(lambda label: np.zeros(label + 1), src='labels', dst='ragged')
    assert batch.ragged.dtype == object and batch.ragged[2].shape == (3,)


def test_unknown_or_empty_src():
    with pytest.raises(ValueError, match="components \\('images', 'labels'\\). Received: 'masks'"):
        make_batch().apply_parallel(lambda x: x, src='masks')
    with pytest.raises(ValueError, match="'labels' to hold data"):
        PairBatch(2, data={'images': np.zeros(2)}).apply_parallel(lambda x: x, src='labels')


def test_bad_func_and_workers():
    with pytest.raises(TypeError, match='callable'):
        make_batch().apply_parallel(3)
    with pytest.raises(ValueError, match='workers=0'):
        make_batch().apply_parallel(lambda x: x, workers=0)


def test_accepts_rng():
    def with_rng(x, rng=None):
        return x

    class Holder:
        def method(self, x, *, rng):
            return x

    assert accepts_rng(with_rng) and accepts_rng(Holder().method)
    assert not accepts_rng(lambda x, **kwargs: x)
    assert not accepts_rng(np.add)


def test_collect():
    assert collect([np.zeros(2), np.ones(2)]).shape == (2, 2)
    assert collect([1, 2.5]).dtype == float
    assert collect([np.zeros(2), np.zeros(3)]).dtype == object
    assert collect(['a', 'bc']).dtype == object
    assert collect([]).shape == (0,)


def test_run_items_order():
    assert run_items(lambda i: i * i, range(5), workers=3) == [0, 1, 4, 9, 16]


def test_tensor_results_stack_as_tensors():
    import torch
    batch = make_batch(3).apply_parallel(lambda item: torch.as_tensor(item), dst='tensors')
    assert isinstance(batch.tensors, torch.Tensor) and batch.tensors.shape == (3, 2)


def test_batchflow_engine_options():
    assert make_batch().apply_parallel(lambda x: x + 1, src='labels', target='threads').labels[0] == 1
    assert make_batch().apply_parallel(lambda x, **k: 'rng' in k, src='labels', dst='ok', requires_rng=True).ok.all()
    with pytest.raises(ValueError, match="target 'for' or 'threads'"):
        make_batch().apply_parallel(lambda x: x, src='labels', target='mpc')
    with pytest.raises(ValueError, match='init=None and post=None'):
        make_batch().apply_parallel(lambda x: x, src='labels', post='_assemble')
    with pytest.raises(ValueError, match='src=None'):
        make_batch().apply_parallel(lambda x: x, None)


def test_apply_parallel_decorator_makes_a_per_item_action():
    from flowpipe.batch import apply_parallel

    class Scaled(PairBatch):
        @apply_parallel
        def scale(self, item, factor, offset=0):
            return item * factor + offset

        @apply_parallel(src='labels', dst='negated')
        def negate(self, item):
            return -item

    assert 'scale' in Scaled.action_names() and 'negate' in Scaled.action_names()
    batch = Scaled(3, data=(np.arange(6.).reshape(3, 2), np.arange(3)))
    batch.scale(10, offset=PerItem([1, 2, 3]), src='labels', dst='scaled')
    assert list(batch.scaled) == [1, 12, 23]
    assert list(batch.negate().negated) == [0, -1, -2]
    assert batch.scale(2).images[2, 1] == 10


def test_assemble_puts_results_into_components():
    batch = PairBatch(np.arange(3))
    assert batch.assemble([np.zeros(2), np.ones(2), np.full(2, 2.0)], dst='new') is batch
    assert batch.new.shape == (3, 2) and batch.new[2].tolist() == [2, 2]
    batch.assemble([(1, 'a'), (2, 'b'), (3, 'c')], dst=['first', 'second'])
    assert batch.first.tolist() == [1, 2, 3] and list(batch.second) == ['a', 'b', 'c']
    batch.assemble(np.array([[5, 6], [7, 8], [9, 10]]), dst_default=['first', 'second'])
    assert batch.first.tolist() == [5, 7, 9] and batch.second.tolist() == [6, 8, 10]
    batch.assemble([4, 5, 6], src='first')
    assert batch.first.tolist() == [4, 5, 6]


def test_assemble_all_components_and_failures():
    batch = PairBatch(np.arange(2))
    batch.assemble([(0, 1), (2, 3)], dst_default='components')
    assert [getattr(batch, name).tolist() for name in batch.components] == [[0, 2], [1, 3]]
    with pytest.raises(RuntimeError, match='1 of 2 items failed.*boom'):
        batch.assemble([ValueError('boom'), 1], dst='images')
    with pytest.raises(ValueError, match='Expected the components to fill'):
        batch.assemble([1, 2])
    with pytest.raises(ValueError, match='one result per item'):
        batch.assemble([1], dst='images')
    with pytest.raises(ValueError, match='2 values per item'):
        batch.assemble([(1,), (2,)], dst=['a', 'b'])
