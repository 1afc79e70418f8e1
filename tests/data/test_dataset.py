import sys
import types

import numpy as np
import pytest

from flowpipe.batch import Batch
from flowpipe.data import Dataset, DatasetIndex


class PairBatch(Batch):
    components = ('images', 'labels')


def make_dataset(size=10, **kwargs):
    images = np.arange(size * 4, dtype=np.float32).reshape(size, 2, 2)
    labels = np.arange(size) % 3
    return Dataset(size, batch_class=PairBatch, preloaded=(images, labels), **kwargs)


def test_basic_properties():
    dataset = make_dataset(num_classes=3)
    assert len(dataset) == dataset.size == 10
    assert list(dataset.indices) == list(range(10))
    assert dataset.num_classes == 3
    assert dataset.attributes == {'num_classes': 3}
    assert 'size=10' in repr(dataset)


def test_default_batch_class_and_dict_preloaded():
    dataset = Dataset(DatasetIndex(4), preloaded={'x': [1, 2, 3, 4]})
    batch = dataset.create_batch([2, 0])
    assert type(batch) is Batch
    assert batch.components == ('x',)
    assert list(batch.x) == [3, 1]
    assert batch.dataset is dataset


def test_create_batch_slices_components():
    dataset = make_dataset()
    batch = dataset.create_batch(DatasetIndex(10).subset([3, 1]))
    assert isinstance(batch, PairBatch)
    assert list(batch.labels) == [0, 1]
    assert np.array_equal(batch.images, dataset.preloaded['images'][[3, 1]])


def test_batch_data_is_a_copy():
    dataset = make_dataset()
    batch = dataset.create_batch([0, 1])
    batch.images += 100
    assert dataset.preloaded['images'][0, 0, 0] == 0


def test_split_shares_data_and_maps_ids():
    dataset = make_dataset(num_classes=3)
    dataset.split(0.6, shuffle=4)
    assert len(dataset.train) == 6 and len(dataset.test) == 4 and dataset.validation is None
    assert dataset.train.preloaded is dataset.preloaded
    assert dataset.test.num_classes == 3
    batch = dataset.test.create_batch(dataset.test.index)
    assert list(batch.labels) == list(dataset.test.indices % 3)


def test_non_range_ids_map_to_positions():
    dataset = Dataset(['x', 'y', 'z'], preloaded={'value': np.array([10, 20, 30])})
    dataset.split(0.34)
    batch = dataset.test.create_batch(dataset.test.index)
    assert list(batch.indices) == ['y', 'z'] and list(batch.value) == [20, 30]


def test_gen_batch_and_next_batch():
    dataset = make_dataset()
    got = [list(batch.labels) for batch in dataset.gen_batch(4, n_epochs=1)]
    assert got == [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0]]
    assert dataset.n_batches(4, n_epochs=1) == 3
    assert list(dataset.next_batch(3).indices) == [0, 1, 2]
    assert list(dataset.next_batch(3).indices) == [3, 4, 5]
    dataset.reset_iter()
    assert list(dataset.next_batch(3).indices) == [0, 1, 2]


def test_without_preloaded():
    batch = Dataset(5, batch_class=PairBatch).create_batch([1, 2])
    assert batch.images is None and batch.components == ('images', 'labels')


def test_ragged_preloaded_becomes_object_array():
    images = [np.zeros((2, 2)), np.zeros((3, 3)), np.zeros((1, 1))]
    batch = Dataset(3, preloaded={'images': images}).create_batch([2, 0])
    assert batch.images.dtype == object and batch.images[0].shape == (1, 1)


def test_mismatched_lengths():
    with pytest.raises(ValueError, match="'labels' to have one entry per item \\(10\\). Received 9"):
        Dataset(10, preloaded={'images': np.zeros(10), 'labels': np.zeros(9)})


def test_a_tuple_fills_the_declared_components_first():
    with pytest.raises(ValueError, match='at most 2 arrays.*Received a tuple of 3'):
        Dataset(3, batch_class=PairBatch, preloaded=(np.zeros(3),) * 3)
    batch = Dataset(3, batch_class=PairBatch, preloaded=(np.arange(3) * 10,)).next_batch(2, shuffle=False)
    assert list(batch.images) == [0, 10] and batch.labels is None     # batchflow's: the first components


def test_bad_preloaded_type():
    with pytest.raises(TypeError, match='preloaded to be a dict'):
        Dataset(3, batch_class=PairBatch, preloaded=np.zeros(3))


def test_unnamed_preloaded_data_of_batches_without_components():
    pd = pytest.importorskip('pandas')
    array = Dataset(4, preloaded=np.arange(4) * 10)
    assert list(array.next_batch(2, shuffle=False).data) == [0, 10]
    assert list(array.next_batch(2, shuffle=False).data) == [20, 30]
    pair = Dataset(4, preloaded=(np.arange(4), np.arange(4) + 100)).create_batch([3, 1])
    assert [list(values) for values in pair.data] == [[3, 1], [103, 101]] and pair[1] == (1, 101)
    frame = pd.DataFrame({'a': [1, 2, 3], 'b': [4, 5, 6]}, index=['x', 'y', 'z'])
    batch = Dataset(frame.index.to_numpy(), preloaded=frame).create_batch(['z', 'x'])
    assert list(batch.data['b']) == [6, 4] and list(batch['x']) == [1, 4]
    named = Dataset(frame.index.to_numpy(), batch_class=PairBatch, preloaded=frame.rename(columns={'a': 'images'}))
    assert list(named.create_batch(['y']).images) == [2] and list(named.create_batch(['y']).b) == [5]
    assert repr(array) == 'Dataset(size=4, batch_class=Batch, components=None)'
    with pytest.raises(KeyError, match='unnamed'):
        array.component('x')
    with pytest.raises(ValueError, match=r'one entry per item \(4\)'):
        Dataset(4, preloaded=(np.zeros(4), np.zeros(3)))


def test_preloaded_values_by_item_id():
    by_id = Dataset(np.array(['a', 'b', 'c']), batch_class=PairBatch, preloaded={'images': {'c': 3, 'a': 1, 'b': 2}})
    assert list(by_id.create_batch(['c', 'a']).images) == [3, 1]
    with pytest.raises(KeyError, match=r"without \['c'\]"):
        Dataset(np.array(['a', 'b', 'c']), preloaded={'images': {'a': 1, 'b': 2}})


@pytest.mark.parametrize('name', ['split', 'p', 'indices', 'train'])
def test_attribute_clash(name):
    with pytest.raises(ValueError, match=f'Received: {name}=1'):
        Dataset(3, **{name: 1})


def test_component_name_clash():
    with pytest.raises(ValueError, match="'size'"):
        Dataset(3, preloaded={'size': np.zeros(3)})


def test_empty_dataset():
    with pytest.raises(ValueError, match='empty'):
        Dataset([])


def test_unknown_ids_in_batch():
    with pytest.raises(ValueError, match='unknown ids'):
        Dataset(['a', 'b']).create_batch(['c'])
    with pytest.raises(ValueError, match='unknown ids'):
        Dataset(['a', 'b'], preloaded={'x': [1, 2]}).create_batch(DatasetIndex(['b', 'c']))
    with pytest.raises(ValueError, match='out of range'):
        Dataset(3, preloaded={'x': [1, 2, 3]}).create_batch(DatasetIndex([1, 5]))


def test_split_dataset_index_is_checked_against_its_own_data():
    parent = DatasetIndex([10, 20, 30, 40])
    parent.split(0.5)
    dataset = Dataset(parent.train, preloaded={'x': np.array([1, 2])})
    assert list(dataset.create_batch(parent.train.subset([1])).x) == [2]
    with pytest.raises(ValueError, match='unknown ids'):
        dataset.create_batch(parent.test)


def test_pipeline_is_new_each_time(monkeypatch):
    class FakePipeline:
        def __init__(self, dataset=None, config=None):
            self.dataset, self.config = dataset, config

    module = types.ModuleType('flowpipe.pipeline')
    module.Pipeline = FakePipeline
    monkeypatch.setitem(sys.modules, 'flowpipe.pipeline', module)
    dataset = make_dataset()
    first, second = dataset.p, dataset.pipeline({'a': 1})
    assert first is not second and first is not dataset.p
    assert first.dataset is dataset and second.config == {'a': 1}


def test_files_dataset_batches_know_paths(tmp_path):
    from flowpipe.data import FilesIndex
    for name in ('a.txt', 'b.txt', 'c.txt'):
        (tmp_path / name).write_text(name)
    dataset = Dataset(FilesIndex(path=str(tmp_path / '*.txt'), no_ext=True), source='disk')
    dataset.split(0.5)
    batch = next(dataset.train.gen_batch(2, n_epochs=1))
    assert list(batch.indices) == ['a', 'b'] and batch.dataset.source == 'disk'
    assert batch.index.get_fullpath('b') == str(tmp_path / 'b.txt')


# batchflow's forms of the same API


def test_build_index_and_from_dataset():
    assert isinstance(Dataset.build_index(25), DatasetIndex)
    dataset = make_dataset(num_classes=3)
    sub = Dataset.from_dataset(dataset, DatasetIndex(5))
    assert type(sub) is Dataset and sub.batch_class is PairBatch and sub.num_classes == 3
    assert list(sub.indices) == list(range(5)) and sub.preloaded is dataset.preloaded

    class Other(PairBatch):
        pass
    assert dataset.from_dataset(dataset, [1, 2], batch_class=Other).batch_class is Other


def test_create_subset_of_unknown_ids_is_an_index_error():
    dataset = Dataset(100)
    with pytest.raises(IndexError, match='does not hold|not hold'):
        dataset.create_subset(DatasetIndex(np.arange(200, 225)))
    with pytest.raises(IndexError):
        dataset.create_subset([99, 100])
    assert len(dataset.create_subset(DatasetIndex(25))) == 25


def test_create_batch_by_positions():
    dataset = Dataset(['a', 'b', 'c'], preloaded={'x': [1, 2, 3]})
    batch = dataset.create_batch([2, 0], pos=True)
    assert list(batch.indices) == ['c', 'a'] and list(batch.x) == [3, 1]


def test_reset_iter_restarts_next_batch():
    dataset = make_dataset()
    dataset.next_batch(4)
    dataset.reset('iter')
    assert list(dataset.next_batch(4).indices) == [0, 1, 2, 3]


def test_split_validation_takes_the_rest():
    dataset = Dataset(100)
    dataset.split([0.6, 0.25])
    assert [len(dataset.train), len(dataset.test), len(dataset.validation)] == [60, 25, 15]


def test_cv_split_makes_folds_on_the_dataset_and_its_parts():
    dataset = make_dataset(num_classes=3)
    dataset.cv_split(n_splits=3)
    assert [list(dataset.cv(i).test.indices) for i in range(3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert list(dataset.cv1.train.indices) == [0, 1, 2, 3, 7, 8, 9]
    assert dataset.train.cv2 is dataset.cv2.train and dataset.test.cv0 is dataset.cv0.test
    assert dataset.cv0.num_classes == 3 and not hasattr(dataset, 'cv3')
    batch = dataset.cv2.test.create_batch(dataset.cv2.test.index)
    assert list(batch.labels) == [1, 2, 0]
    dataset.cv_split(n_splits=2, shuffle=5)
    assert not hasattr(dataset, 'cv2') and not hasattr(dataset.train, 'cv2')
    assert sorted(np.concatenate([dataset.cv0.test.indices, dataset.cv1.test.indices])) == list(range(10))
    with pytest.raises(ValueError, match='fold in 0..1'):
        dataset.cv(2)
    with pytest.raises(ValueError, match='n_splits'):
        dataset.cv_split(n_splits=11)


def test_component_gives_a_split_its_own_values_while_preloaded_is_the_whole_store():
    dataset = make_dataset()
    dataset.split([0.6, 0.2], shuffle=5)
    assert dataset.test.preloaded['labels'] is dataset.preloaded['labels']          # shared, all 10 items
    for part in (dataset.train, dataset.test, dataset.validation):
        assert np.array_equal(part.component('images'), dataset.preloaded['images'][part.indices])
        assert np.array_equal(part.component('labels'), part.create_batch(part.indices).labels)
    assert np.shares_memory(dataset.component('images'), dataset.preloaded['images'])   # in order: a view
    with pytest.raises(KeyError, match=r"among \('images', 'labels'\). Received: 'masks'"):
        dataset.train.component('masks')
    with pytest.raises(KeyError, match='no preloaded data'):
        Dataset(3).component('x')
