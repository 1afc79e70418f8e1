import numpy as np
import pytest

from flowpipe.data import DatasetIndex
from flowpipe.data.index import split_counts


def batches(index, *args, **kwargs):
    return [list(sub.indices) for sub in index.gen_batch(*args, **kwargs)]


class TestCreation:
    def test_from_count(self):
        index = DatasetIndex(5)
        assert list(index.indices) == [0, 1, 2, 3, 4]
        assert len(index) == index.size == 5

    def test_from_array_callable_and_index(self):
        ids = np.array([10, 3, 7])
        assert list(DatasetIndex(ids).indices) == [10, 3, 7]
        assert list(DatasetIndex(lambda: ['a', 'b']).indices) == ['a', 'b']
        assert list(DatasetIndex(DatasetIndex(3)).indices) == [0, 1, 2]

    @pytest.mark.parametrize('bad', [0, [], np.empty(0)])
    def test_empty_index_rejected(self, bad):
        with pytest.raises(ValueError, match='empty|positive number'):
            DatasetIndex(bad)

    def test_duplicates_rejected(self):
        with pytest.raises(ValueError, match='unique item ids.*3'):
            DatasetIndex([1, 3, 3])

    def test_2d_rejected(self):
        with pytest.raises(TypeError, match='1-D'):
            DatasetIndex(np.zeros((2, 2)))

    def test_repr_names_size(self):
        assert 'size=3' in repr(DatasetIndex(3))


class TestSubsets:
    def test_subset_by_positions_keeps_ids(self):
        index = DatasetIndex([5, 6, 7, 8])
        assert list(index.subset([1, 3]).indices) == [6, 8]

    def test_create_subset_by_ids(self):
        index = DatasetIndex(['a', 'b', 'c'])
        assert list(index.create_subset(['c', 'a']).indices) == ['c', 'a']

    def test_create_subset_unknown_ids(self):
        with pytest.raises(ValueError, match="unknown ids.*'z'"):
            DatasetIndex(['a', 'b']).create_subset(['a', 'z'])

    def test_get_pos(self):
        assert list(DatasetIndex(4).get_pos([3, 1])) == [3, 1]
        assert list(DatasetIndex([40, 10, 30]).get_pos([30, 40])) == [2, 0]
        with pytest.raises(ValueError, match='out of range'):
            DatasetIndex(4).get_pos([4])


class TestSplit:
    def test_float_share(self):
        index = DatasetIndex(10)
        index.split(0.8)
        assert list(index.train.indices) == list(range(8))
        assert list(index.test.indices) == [8, 9]
        assert index.validation is None

    def test_three_shares_cover_everything(self):
        index = DatasetIndex(10)
        index.split([0.5, 0.3, 0.2], shuffle=3)
        parts = [index.train.indices, index.test.indices, index.validation.indices]
        assert [len(part) for part in parts] == [5, 3, 2]
        assert sorted(np.concatenate(parts)) == list(range(10))

    def test_shuffle_is_reproducible(self):
        first, second = DatasetIndex(20), DatasetIndex(20)
        first.split(0.5, shuffle=11)
        second.split(0.5, shuffle=11)
        assert list(first.train.indices) == list(second.train.indices)
        assert list(first.train.indices) != list(range(10))

    def test_small_share_never_empty(self):
        index = DatasetIndex(5)
        index.split([0.9, 0.05, 0.05])
        assert [len(index.train), len(index.test), len(index.validation)] == [3, 1, 1]

    def test_impossible_split(self):
        with pytest.raises(ValueError, match='at least 3 items.*2 items'):
            DatasetIndex(2).split([0.5, 0.25, 0.25])

    @pytest.mark.parametrize('shares', [[0.7, 0.5], [-0.1, 0.5], 1.5])
    def test_bad_shares(self, shares):
        with pytest.raises(ValueError, match='summing to at most 1'):
            DatasetIndex(10).split(shares)

    def test_bad_shares_type(self):
        with pytest.raises(TypeError, match='shares'):
            DatasetIndex(10).split('half')

    def test_validation_takes_what_train_and_test_leave(self):
        assert split_counts(10, [0.5, 0.2]) == [5, 2, 3]
        assert split_counts(10, [0.5, 0.2, 0.1]) == [5, 2, 3]
        assert split_counts(10, [0.4, 0.6]) == [4, 6, 0]
        index = DatasetIndex(100)
        index.split([0.6, 0.25])
        assert [len(index.train), len(index.test), len(index.validation)] == [60, 25, 15]

    def test_calc_split(self):
        assert DatasetIndex(5).calc_split([0.4, 0.6]) == (2, 3, 0)
        assert sum(DatasetIndex(5).calc_split()) == 5
        with pytest.raises(ValueError, match='4 shares'):
            DatasetIndex(5).calc_split([0.25] * 4)

    def test_counts_sum_to_size(self):
        for size in range(3, 40):
            counts = split_counts(size, [0.33, 0.33, 0.34])
            assert sum(counts) == size and min(counts) >= 1


class TestGenBatch:
    def test_epoch_crossing_without_drop_last(self):
        assert batches(DatasetIndex(10), 4, n_epochs=2) == [
            [0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]

    def test_last_batch_short(self):
        assert batches(DatasetIndex(10), 4, n_epochs=1) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]

    def test_drop_last_drops_each_tail(self):
        assert batches(DatasetIndex(10), 4, n_epochs=2, drop_last=True) == [
            [0, 1, 2, 3], [4, 5, 6, 7], [0, 1, 2, 3], [4, 5, 6, 7]]

    def test_n_iters_cross_epochs(self):
        assert batches(DatasetIndex(5), 3, n_iters=3) == [[0, 1, 2], [3, 4, 0], [1, 2, 3]]

    def test_batch_larger_than_index_without_drop_last(self):
        assert batches(DatasetIndex(3), 5, n_epochs=3) == [[0, 1, 2, 0, 1], [2, 0, 1, 2]]

    def test_ids_not_positions(self):
        assert batches(DatasetIndex([7, 8, 9]), 2, n_epochs=1) == [[7, 8], [9]]

    def test_shuffle_reproducible_and_new_each_epoch(self):
        index = DatasetIndex(12)
        first = batches(index, 12, shuffle=5, n_epochs=3)
        assert first == batches(index, 12, shuffle=5, n_epochs=3)
        assert first != batches(index, 12, shuffle=6, n_epochs=3)
        assert all(sorted(epoch) == list(range(12)) for epoch in first)
        assert first[0] != first[1]

    def test_seed_argument_drives_shuffle(self):
        index = DatasetIndex(12)
        assert batches(index, 4, shuffle=True, seed=9, n_iters=3) == batches(index, 4, shuffle=9, n_iters=3)
        ready = np.random.SeedSequence(9, spawn_key=(0,))
        assert batches(index, 4, shuffle=True, seed=ready, n_iters=3) == batches(index, 4, shuffle=9, n_iters=3)

    def test_infinite_is_lazy(self):
        generator = DatasetIndex(3).gen_batch(2)
        assert [list(next(generator).indices) for _ in range(4)] == [[0, 1], [2, 0], [1, 2], [0, 1]]
        generator.close()

    def test_sub_indices_are_dataset_indices(self):
        sub = next(DatasetIndex(4).gen_batch(2, n_iters=1))
        assert isinstance(sub, DatasetIndex) and len(sub) == 2

    def test_n_batches(self):
        index = DatasetIndex(10)
        assert index.n_batches(4, n_epochs=2) == 5
        assert index.n_batches(4, n_epochs=2, drop_last=True) == 4
        assert index.n_batches(4, n_iters=7) == 7
        assert index.n_batches(4) is None
        for drop_last in (False, True):
            assert index.n_batches(3, n_epochs=3, drop_last=drop_last) == len(
                batches(index, 3, n_epochs=3, drop_last=drop_last))

    def test_batch_larger_than_index_with_drop_last(self):
        with pytest.raises(ValueError, match='batch_size <= 3.*batch_size=4'):
            DatasetIndex(3).gen_batch(4, n_epochs=1, drop_last=True)

    @pytest.mark.parametrize('size', [0, -2])
    def test_batch_size_below_one(self, size):
        with pytest.raises(ValueError, match=f'batch_size >= 1.*batch_size={size}'):
            DatasetIndex(3).gen_batch(size, n_epochs=1)

    def test_both_limits(self):
        with pytest.raises(ValueError, match='at most one of n_iters and n_epochs'):
            DatasetIndex(3).gen_batch(2, n_iters=1, n_epochs=1)

    def test_bad_types(self):
        with pytest.raises(TypeError, match='batch_size to be an int'):
            DatasetIndex(3).gen_batch(2.5)
        with pytest.raises(TypeError, match='shuffle'):
            DatasetIndex(3).gen_batch(2, shuffle='yes')
        with pytest.raises(TypeError, match='seed'):
            DatasetIndex(3).gen_batch(2, shuffle=True, seed='x')


class TestNextBatch:
    def test_keeps_state_and_stops(self):
        index = DatasetIndex(5)
        got = [list(index.next_batch(2, n_epochs=1).indices) for _ in range(3)]
        assert got == [[0, 1], [2, 3], [4]]
        with pytest.raises(StopIteration):
            index.next_batch(2, n_epochs=1)

    def test_reset_iter(self):
        index = DatasetIndex(5)
        index.next_batch(2)
        index.reset_iter()
        assert list(index.next_batch(2).indices) == [0, 1]

    def test_infinite_without_limits(self):
        index = DatasetIndex(3)
        assert [len(index.next_batch(2)) for _ in range(10)] == [2] * 10

    def test_new_arguments_restart(self):
        index = DatasetIndex(6)
        index.next_batch(2)
        assert list(index.next_batch(2, n_epochs=1).indices) == [0, 1]

    def test_batch_size_may_change_and_the_iteration_goes_on(self):
        index = DatasetIndex(5)
        got = [list(index.next_batch(size, n_epochs=2).indices) for size in (3, 3, 4)]
        assert got == [[0, 1, 2], [3, 4, 0], [1, 2, 3, 4]]
        with pytest.raises(StopIteration):
            index.next_batch(1, n_epochs=2)
        index.reset('iter')
        dropped = [list(index.next_batch(size, drop_last=True).indices) for size in (2, 2, 3, 2)]
        assert dropped == [[0, 1], [2, 3], [0, 1, 2], [3, 4]]

    def test_n_iters_counts_calls(self):
        index = DatasetIndex(5)
        assert [len(index.next_batch(size, n_iters=2)) for size in (1, 4)] == [1, 4]
        with pytest.raises(StopIteration):
            index.next_batch(1, n_iters=2)

    def test_pickle_drops_iteration(self):
        import pickle
        index = DatasetIndex(4)
        index.next_batch(2)
        restored = pickle.loads(pickle.dumps(index))
        assert list(restored.next_batch(2).indices) == [0, 1]


class TestBatchflowForms:
    def test_index_is_the_ids(self):
        assert list(DatasetIndex(['a', 'b']).index) == ['a', 'b']

    def test_get_pos_of_one_id_a_slice_of_ids_and_all(self):
        index = DatasetIndex(['a', 'b', 'c', 'd'])
        assert index.get_pos('c') == 2
        assert list(index.get_pos(['a', 'c'])) == [0, 2]
        assert DatasetIndex(5).get_pos(4) == 4

    def test_create_batch_by_positions_or_ids_keeps_the_class(self):
        class Child(DatasetIndex):
            pass
        index = Child(['a', 'b', 'c'])
        assert isinstance(index.create_batch(range(2)), Child)
        assert list(index.create_batch([2, 0]).indices) == ['c', 'a']
        assert list(index.create_batch(['b'], pos=False).indices) == ['b']

    def test_shuffle_orders_follow_make_rng(self):
        from flowpipe import make_rng
        index = DatasetIndex(6)
        assert list(index.shuffle(False)) == list(range(6))
        assert list(index.shuffle(13)) == list(make_rng(13).permutation(6))
        assert list(index.shuffle(13)) == list(next(index.gen_batch(6, shuffle=13)).indices)
        state = np.random.RandomState(13).permutation(6)
        assert list(index.shuffle(np.random.RandomState(13))) == list(state)
        assert sorted(index.shuffle(True)) == list(range(6))

    def test_reset_rejects_other_targets(self):
        with pytest.raises(ValueError, match="reset\\('iter'\\)"):
            DatasetIndex(3).reset('variables')
