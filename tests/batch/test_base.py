import pickle

import numpy as np
import pytest

from flowpipe.batch import ActionSpec, Batch, action
from flowpipe.data import DatasetIndex


class PairBatch(Batch):
    components = ('images', 'labels')

    @action
    def double(self):
        self.images = self.images * 2
        return self

    @action(use_lock=True)
    def locked(self):
        return self

    def helper(self):
        return self


class ChildBatch(PairBatch):
    @action
    def extra(self):
        return self

    def locked(self):
        """Overridden without @action: no longer an action."""
        return self


def make_batch(size=4):
    return PairBatch(np.arange(size), data=(np.arange(size) * 10, np.arange(size) % 2))


class TestComponents:
    def test_tuple_data(self):
        batch = make_batch()
        assert batch.components == ('images', 'labels')
        assert list(batch.images) == [0, 10, 20, 30]
        assert batch.size == len(batch) == 4
        assert list(batch.indices) == [0, 1, 2, 3]
        assert isinstance(batch.index, DatasetIndex)

    def test_dict_data_adds_dynamic_components(self):
        batch = PairBatch(3, data={'images': np.zeros(3), 'masks': [1, 2, 3]})
        assert batch.components == ('images', 'labels', 'masks')
        assert batch.labels is None
        assert isinstance(batch.masks, np.ndarray)

    def test_plain_batch_has_no_declared_components(self):
        batch = Batch(2)
        assert batch.components == () and Batch.components is None

    def test_assignment_updates_component(self):
        batch = make_batch()
        batch.images = np.ones(4)
        assert list(batch.data['images']) == [1, 1, 1, 1]

    def test_data_view(self):
        batch = make_batch()
        assert list(batch.data) == ['images', 'labels']
        assert len(batch.data) == 2
        with pytest.raises(KeyError, match="'masks'"):
            batch.data['masks']

    def test_add_components(self):
        batch = make_batch()
        batch.add_components('masks', init=np.zeros(4))
        batch.add_components(['a', 'b'], init=[np.ones(4), [5, 6, 7, 8]])
        batch.add_components(['c', 'd'])
        assert batch.components == ('images', 'labels', 'masks', 'a', 'b', 'c', 'd')
        assert list(batch.b) == [5, 6, 7, 8] and batch.c is None

    def test_add_existing_component(self):
        with pytest.raises(ValueError, match="existing \\['images'\\]"):
            make_batch().add_components('images')

    def test_add_component_of_wrong_length(self):
        with pytest.raises(ValueError, match="'masks' to have 4 items.*Received 3"):
            make_batch().add_components('masks', init=np.zeros(3))

    def test_mismatched_lengths(self):
        with pytest.raises(ValueError, match="'labels' to have 3 items.*Received 2"):
            PairBatch(3, data=(np.zeros(3), np.zeros(2)))

    def test_wrong_tuple_length(self):
        with pytest.raises(ValueError, match='tuple of 2 components'):
            PairBatch(3, data=(np.zeros(3),))

    def test_bad_data_type(self):
        with pytest.raises(TypeError, match='dict or a tuple'):
            Batch(3, data=[1, 2, 3])

    @pytest.mark.parametrize('name', ['size', 'apply_parallel', 'index', 'double'])
    def test_component_name_hiding_an_attribute(self, name):
        with pytest.raises(ValueError, match=repr(name)):
            PairBatch(2, data={name: [1, 2]})

    def test_declared_name_clash_fails_at_class_creation(self):
        with pytest.raises(ValueError, match="'merge'"):
            type('Bad', (Batch,), {'components': ('merge',)})

    def test_scalar_component(self):
        with pytest.raises(TypeError, match="component 'images'"):
            Batch(2, data={'images': 5})

    def test_pickle(self):
        batch = pickle.loads(pickle.dumps(make_batch()))
        assert list(batch.labels) == [0, 1, 0, 1] and batch.components == ('images', 'labels')

    def test_repr(self):
        assert repr(make_batch()) == "PairBatch(size=4, components=('images', 'labels'))"


class TestRandom:
    def test_random_made_from_seed_on_first_use(self):
        batch = make_batch()
        assert batch._random is None
        batch.seed = 5
        expected = np.random.default_rng(np.random.SeedSequence(5)).random()
        assert batch.random.random() == expected
        assert batch.random is batch.random

    def test_new_seed_resets_generator(self):
        batch = make_batch()
        batch.seed = np.random.SeedSequence(1)
        first = batch.random.random()
        batch.seed = np.random.SeedSequence(1)
        assert batch.random.random() == first

    def test_default_is_fresh_entropy(self):
        assert make_batch().seed.entropy != make_batch().seed.entropy

    def test_random_can_be_set(self):
        batch = make_batch()
        rng = np.random.default_rng(0)
        batch.random = rng
        assert batch.random is rng


class TestActions:
    def test_action_marks_method(self):
        assert PairBatch.double.action == ActionSpec(use_lock=False)
        assert PairBatch.locked.action.use_lock is True
        assert not hasattr(PairBatch.helper, 'action')

    def test_action_names_include_inherited(self):
        base = ('add_components', 'apply_parallel', 'do_nothing', 'load', 'to_device')
        assert PairBatch.action_names() == tuple(sorted(base + ('double', 'locked')))
        assert ChildBatch.action_names() == tuple(sorted(base + ('double', 'extra')))
        assert Batch.action_names() == base

    def test_action_spec(self):
        assert PairBatch.action_spec('locked') == ActionSpec(use_lock=True)
        assert PairBatch.action_spec('helper') is None
        assert PairBatch.action_spec('nope') is None

    def test_action_runs(self):
        assert list(make_batch().double().images) == [0, 20, 40, 60]

    def test_bad_use_lock(self):
        with pytest.raises(TypeError, match="use_lock=1"):
            action(use_lock=1)


class TestSubsetAndMerge:
    def test_subset(self):
        sub = make_batch().subset([3, 0])
        assert list(sub.indices) == [3, 0] and list(sub.images) == [30, 0]
        assert type(sub) is PairBatch

    def test_subset_of_list_component(self):
        batch = make_batch()
        batch.add_components('names', init=['a', 'b', 'c', 'd'])
        batch.labels = [5, 6, 7, 8]
        sub = batch.subset([1, 2])
        assert list(sub.names) == ['b', 'c'] and list(sub.labels) == [6, 7]

    def test_merge(self):
        first, second = make_batch(), PairBatch([7, 8], data=(np.array([70, 80]), np.array([1, 1])))
        merged, rest = Batch.merge([first, second])
        assert rest is None
        assert list(merged.indices) == [0, 1, 2, 3, 7, 8]
        assert list(merged.images) == [0, 10, 20, 30, 70, 80]

    def test_merge_with_batch_size(self):
        batches = [PairBatch([i, i + 10], data=(np.full((2, 3), i), np.array([i, i]))) for i in range(3)]
        merged, rest = Batch.merge(batches, batch_size=4)
        assert list(merged.indices) == [0, 10, 1, 11] and merged.images.shape == (4, 3)
        assert list(rest.indices) == [2, 12] and list(rest.labels) == [2, 2]

    def test_merge_ragged_items(self):
        first = Batch(1, data={'images': [np.zeros((2, 2))]})
        second = Batch([5], data={'images': [np.zeros((3, 3))]})
        merged, _ = Batch.merge([first, second])
        assert merged.images.dtype == object and merged.images[1].shape == (3, 3)

    def test_merge_none_components(self):
        merged, _ = Batch.merge([PairBatch(2), PairBatch([5, 6])])
        assert merged.images is None and len(merged) == 4

    def test_merge_errors(self):
        with pytest.raises(ValueError, match='at least one batch'):
            Batch.merge([])
        with pytest.raises(ValueError, match='same components'):
            Batch.merge([make_batch(), Batch(2)])
        with pytest.raises(ValueError, match='batch_size=0'):
            Batch.merge([make_batch()], batch_size=0)
        with pytest.raises(ValueError, match="'labels' to hold data in every batch or in none"):
            Batch.merge([make_batch(), PairBatch(2, data={'images': np.zeros(2)})])


def test_tensor_components_subset_and_merge():
    import torch
    first = Batch(2, data={'x': torch.arange(2)})
    second = Batch([5, 6, 7], data={'x': torch.arange(3) + 10})
    merged, rest = Batch.merge([first, second], batch_size=4)
    assert torch.equal(merged.x, torch.tensor([0, 1, 10, 11])) and torch.equal(rest.x, torch.tensor([12]))
    assert torch.equal(second.subset([2, 0]).x, torch.tensor([12, 10]))


class TestBatchflowForms:
    def test_preloaded_is_loaded_by_item_id(self):
        data = (np.arange(10) * 10, np.arange(10) % 2)
        batch = PairBatch([7, 2], preloaded=data)
        assert list(batch.images) == [70, 20] and list(batch.labels) == [1, 0]
        merged, rest = PairBatch.merge([batch, batch])
        assert list(merged.images) == [70, 20, 70, 20] and rest is None

    def test_load_into_named_components_and_new_ones(self):
        batch = PairBatch([1, 3])
        batch.load(src={'images': np.arange(5), 'labels': np.arange(5) + 10})
        assert list(batch.images) == [1, 3] and list(batch.labels) == [11, 13]
        batch.load(src=np.arange(5) * 2, dst='doubled')
        assert list(batch.doubled) == [2, 6] and batch.components[-1] == 'doubled'
        batch.load(src=(np.zeros(5), np.ones(5)))
        assert list(batch.labels) == [1, 1]

    def test_load_unnamed_data_into_a_batch_without_components(self):
        data = np.arange(10).reshape(-1, 1) * 100 + np.arange(3)
        batch = Batch([3, 4]).load(src=data)
        assert np.array_equal(batch.data, data[[3, 4]])
        assert [list(row) for row in batch] == [[300, 301, 302], [400, 401, 402]]
        assert np.array_equal(batch.subset([1]).data, data[[4]])

    def test_batchflow_sources_tuples_frames_and_dicts_by_id(self):
        pd = pytest.importorskip('pandas')
        ids = np.array(['b', 'c'])
        frame = pd.DataFrame({'images': [1, 2, 3], 'labels': [4, 5, 6]}, index=['a', 'b', 'c'])
        unnamed = Batch(ids).load(src=frame)            # kept a DataFrame, as batchflow's unnamed data
        assert list(unnamed.data['labels']) == [5, 6] and list(unnamed['c']) == [3, 6]
        pair = Batch([1, 2]).load(src=(np.arange(4), np.arange(4) * 10))
        assert [list(values) for values in pair.data] == [[1, 2], [10, 20]] and pair[2] == (2, 20)
        columns = PairBatch(ids).load(src=frame, dst=('images',))
        assert list(columns.images) == [2, 3] and columns.labels is None
        by_id = PairBatch(ids).load(src={'images': {'a': 0, 'b': 7, 'c': 8}}, dst='images')
        assert list(by_id.images) == [7, 8]
        with pytest.raises(KeyError, match="without \\['c'\\]"):
            PairBatch(ids).load(src={'images': {'b': 7}}, dst='images')
        first = PairBatch([3, 0]).load(src=(np.arange(5) * 10,))   # a short tuple fills the first components
        assert list(first.images) == [30, 0] and first.labels is None
        item = first[0]                                 # batchflow's batch[id]: the item of that id
        assert item.images == 0 and item.labels is None
        item.images = 5
        assert list(first.images) == [30, 5]
        with pytest.raises(ValueError, match='unknown ids'):
            first[7]

    def test_load_errors_name_the_fix(self):
        with pytest.raises(ValueError, match='tuple or a dict src'):
            PairBatch([0]).load(src=np.zeros(3))
        with pytest.raises(IndexError, match='row for every item id'):
            PairBatch([5]).load(src=(np.zeros(3), np.zeros(3)))
        with pytest.raises(TypeError, match='integer item ids'):
            Batch(['a']).load(src=np.zeros(3), dst='x')
        with pytest.raises(ValueError, match="fmt=None"):
            Batch([0]).load(src=np.zeros(3), fmt='blosc')

    def test_iterating_items_reads_and_writes_components(self):
        batch = make_batch(3)
        items = list(batch)
        assert [item.images for item in items] == [0, 10, 20]
        for item in batch:
            item.labels = item.labels + 100
        assert list(batch.labels) == [100, 101, 100]
        assert 'labels=101' in repr(items[1])
        with pytest.raises(AttributeError, match="'masks'"):
            _ = items[0].masks

    def test_do_nothing(self):
        batch = make_batch()
        assert batch.do_nothing(1, key=2) is batch


def test_scalar_component_points_to_a_batch_attribute():
    with pytest.raises(TypeError, match=r"update\(B\('comp'\), value\).*porting"):
        make_batch().add_components('comp', 0)


def test_duplicate_ids_point_to_the_porting_guide():
    with pytest.raises(ValueError, match='unique item ids.*porting'):
        DatasetIndex([1, 1, 2])
