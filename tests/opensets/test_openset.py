"""An open set is a Dataset over all its items, with train and test subsets sharing one store."""
import numpy as np
import pytest

from flowpipe.batch import ImagesBatch
from flowpipe.data import Dataset
from flowpipe.expr import D, F, V
from flowpipe.opensets import Digits, Openset
from flowpipe.pipeline import Pipeline


@pytest.fixture(scope='module')
def digits():
    return Digits()


class Shapes(Openset):
    """Two train images of one shape, three test images of other shapes: the store must stay an object array."""
    name = 'shapes'
    CLASSES = ('small', 'large')

    def __init__(self, test_images=None):
        self.test_images = test_images
        super().__init__(path='unused')

    def _load(self):
        train = np.zeros((2, 4, 4, 3), dtype=np.uint8)
        test = self.test_images
        if test is None:
            test = np.empty(3, dtype=object)
            for i, side in enumerate((5, 6, 7)):
                test[i] = np.full((side, side, 3), i, dtype=np.uint8)
        return {'train': (train, [0, 1]), 'test': (test, np.array([1, 0, 1]))}


def test_the_whole_set_is_a_dataset_of_all_items(digits):
    assert isinstance(digits, Dataset) and isinstance(digits.train, Dataset) and isinstance(digits.test, Dataset)
    assert len(digits) == len(digits.train) + len(digits.test) == 1797
    assert digits.batch_class is ImagesBatch and digits.preloaded['images'].shape == (1797, 8, 8, 1)
    assert digits.indices.tolist() == list(range(1797))
    assert 'size=1797' in repr(digits) and 'test=360' in repr(digits) and 'size=360' in repr(digits.test)


def test_train_and_test_are_disjoint_and_cover_the_whole_set(digits):
    train, test = set(digits.train.indices.tolist()), set(digits.test.indices.tolist())
    assert not train & test
    assert train | test == set(digits.indices.tolist())
    assert digits.train.indices.tolist() == list(range(1437))  # train items come first


def test_subsets_share_one_store(digits):
    assert digits.train.preloaded is digits.preloaded and digits.test.preloaded is digits.preloaded
    for part in (digits.train, digits.test):
        view = part.component('images')
        assert np.shares_memory(view, digits.preloaded['images']) and len(view) == len(part)
    whole = np.concatenate([digits.train.component('labels'), digits.test.component('labels')])
    assert np.array_equal(whole, digits.preloaded['labels'])
    assert digits.train.train is None and digits.test.test is None


def test_a_split_has_its_own_images_and_labels(digits):
    assert len(digits.test.preloaded['images']) == 1797          # the shared store, train items included
    for part in (digits, digits.train, digits.test):
        assert len(part.images) == len(part.labels) == len(part)
        assert np.array_equal(part.images, part.component('images'))
        assert np.array_equal(part.labels, part.create_batch(part.indices).labels)
    assert np.array_equal(digits.test.images, digits.preloaded['images'][1437:])
    pipeline = (Pipeline().init_variable('n', 0).update(V('n'), F(len)(D.images))) << digits.test
    pipeline.run(16, n_iters=1)
    assert pipeline.v('n') == 360


def test_p_is_a_new_pipeline_bound_to_the_set_each_time(digits):
    first, second = digits.p, digits.p
    assert isinstance(first, Pipeline) and first is not second
    assert first.dataset is digits and second.dataset is digits
    pipeline = first.init_variable('n', 0).update(V('n'), D().size)
    batch = pipeline.next_batch(4)
    assert len(batch) == 4 and pipeline.v('n') == 1797


def test_next_batch_on_the_whole_set_and_on_a_subset():
    digits = Digits()
    batch = digits.next_batch(8)
    assert isinstance(batch, ImagesBatch) and batch.images.shape == (8, 8, 8, 1)
    assert np.array_equal(batch.labels, digits.preloaded['labels'][:8])
    test_batch = digits.test.next_batch(8)
    assert test_batch.indices.tolist() == list(range(1437, 1445))
    assert np.array_equal(test_batch.images, digits.test.component('images')[:8])


@pytest.mark.parametrize('part', [None, 'train', 'test'])
def test_dataset_attributes_evaluate_in_a_pipeline(digits, part):
    dataset = digits if part is None else getattr(digits, part)
    pipeline = (Pipeline().init_variable('n', 0).init_variable('names', ())
                .update(V('n'), D.num_classes).update(V('names'), D('classes'))) << dataset
    pipeline.run(16, n_iters=1)
    assert pipeline.v('n') == 10 and pipeline.v('names') == tuple('0123456789')
    assert dataset.attributes == {'num_classes': 10, 'classes': tuple('0123456789')}


def test_images_of_different_shapes_stay_an_object_array():
    shapes = Shapes()
    images = shapes.preloaded['images']
    assert images.dtype == object and images.shape == (5,)
    assert [image.shape for image in images] == [(4, 4, 3)] * 2 + [(5, 5, 3), (6, 6, 3), (7, 7, 3)]
    assert shapes.preloaded['labels'].tolist() == [0, 1, 1, 0, 1]
    assert (shapes.num_classes, shapes.classes, shapes.test.num_classes) == (2, ('small', 'large'), 2)
    assert np.array_equal(shapes.test.component('images')[2], np.full((7, 7, 3), 2))
    batch = shapes.test.next_batch(3).resize((8, 8)).to_array()
    assert batch.images.shape == (3, 3, 8, 8)


def test_uniform_arrays_of_different_shapes_join_into_an_object_array():
    shapes = Shapes(test_images=np.ones((3, 6, 6, 3), dtype=np.uint8))
    images = shapes.preloaded['images']
    assert images.dtype == object and [image.shape for image in images] == [(4, 4, 3)] * 2 + [(6, 6, 3)] * 3


def test_unknown_component_is_named(digits):
    with pytest.raises(KeyError, match=r"images.*labels.*Received: .*masks"):
        digits.train.component('masks')


def test_classes_declared_on_the_class_are_refused():
    class Legacy(Shapes):
        classes = ('a', 'b')

    with pytest.raises(TypeError, match="'classes'.*CLASSES"):
        Legacy()
