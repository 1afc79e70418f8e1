"""create_item_class: views of items in arrays, dicts, frames and other views; reading copies, writing through."""
import numpy as np
import pytest

from flowpipe.components import BaseComponents, create_item_class
from flowpipe.utils import is_iterable


@pytest.fixture
def arrays():
    return np.arange(10) + 100, np.arange(10) + 200


def test_tuple_source_views_and_nested_views(arrays):
    full = create_item_class(('images', 'labels'), arrays)
    assert isinstance(full, BaseComponents) and full.labels is arrays[1]
    part = create_item_class(('images', 'labels'), full, [2, 3, 4])
    assert part.images.tolist() == [102, 103, 104]
    inner = create_item_class(('images', 'labels'), part, [3, 4])    # ids of the same source
    assert inner.labels.tolist() == [203, 204] and inner[4].images == 104


def test_reading_copies_and_assigning_writes_through(arrays):
    part = create_item_class(['images', 'labels'], arrays, np.array([1, 2]))
    part.labels[0] = -1
    assert arrays[1][1] == 201
    part.labels = [7, 8]
    assert arrays[1][1:3].tolist() == [7, 8]


def test_crop_keeps_a_copy(arrays):
    cropped = create_item_class(('images', 'labels'), arrays, [5, 6], crop=True)
    arrays[0][5] = 0
    assert cropped.images.tolist() == [105, 106]
    assert create_item_class(('images', 'labels'), cropped, 6).labels == 206


def test_dicts_and_frames_by_id():
    pd = pytest.importorskip('pandas')
    frame = pd.DataFrame({'x': [1, 2, 3]}, index=['a', 'b', 'c'])
    view = create_item_class('x', frame, ['c', 'a'])
    assert view.x.tolist() == [3, 1]
    by_key = create_item_class(None, frame, ['b'])
    assert by_key['x'].tolist() == [2]
    nested = create_item_class(('x',), {'x': {'a': 1, 'b': 2}}, 'b')
    assert nested.x == 2
    nested.x = 5
    assert create_item_class(('x',), nested).x == {'a': 1, 'b': 5}


def test_without_names(arrays):
    assert create_item_class(None, arrays, [0, 1])[1].tolist() == [200, 201]
    assert create_item_class(None, arrays[0], [3]).tolist() == [103]
    assert create_item_class(None, {0: arrays[0]}, 2)[0] == 102


def test_errors(arrays):
    view = create_item_class(('images', 'labels'), arrays)
    with pytest.raises(AttributeError, match="components: \\['images', 'labels'\\]"):
        view.masks
    with pytest.raises(AttributeError, match="Expected one of the components"):
        view.masks = 1
    with pytest.raises(TypeError, match='Expected a source'):
        create_item_class(('a',), 5)


def test_is_iterable():
    assert is_iterable([1]) and is_iterable(np.arange(2)) and not is_iterable('ab') and not is_iterable(3)
