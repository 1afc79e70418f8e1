"""L: a component read and written item by item."""
import numpy as np
import pytest

from flowpipe.batch import Batch
from flowpipe.expr import B, Context, L


class Box:
    def __init__(self, value):
        self.value = value
        self.data = {'k': value}
        self.seen = None

    def record(self, *args, **kwargs):
        self.seen = (args, kwargs)
        return len(args)


@pytest.fixture
def ctx():
    batch = Batch(3, data={'boxes': [Box(i) for i in range(3)], 'other': [None] * 3, 'key': ['k'] * 3})
    return Context(batch=batch)


def test_reads_attributes_items_and_calls_per_item(ctx):
    assert L('boxes').value.get(ctx) == [0, 1, 2]
    assert L('boxes').data['k'].get(ctx) == [0, 1, 2]
    assert L.boxes.record(1, B.size, a=B.size).get(ctx) == [2, 2, 2]
    assert ctx.batch.boxes[1].seen == ((1, 3), {'a': 3})
    assert repr(L('boxes').data['k'].record(1)) == "L('boxes').data['k'].record(1)"


def test_writes_one_value_per_item(ctx):
    L('boxes').value.set([10, 11, 12], ctx)
    L('boxes').data['k'].set(L('boxes').value.get(ctx), ctx)
    assert [box.data['k'] for box in ctx.batch.boxes] == [10, 11, 12]
    L('other').set(L('boxes').get(ctx), ctx)
    assert ctx.batch.other[2] is ctx.batch.boxes[2]
    L('boxes').data['list'].set([[], [], []], ctx)
    L('boxes').data['list'].set(['a', 'b', 'c'], ctx, mode='a')
    assert ctx.batch.boxes[1].data['list'] == ['b']


def test_write_errors(ctx):
    with pytest.raises(ValueError, match='one value per batch item \\(3\\)'):
        L('boxes').value.set([1, 2], ctx)
    with pytest.raises(TypeError, match="call's result"):
        L('boxes').record().set([1, 2, 3], ctx)
    with pytest.raises(TypeError, match='name of a batch component'):
        L(3)


def test_in_a_pipeline():
    from flowpipe import Dataset
    batch = (Dataset(2).p
             .add_components('boxes', [Box(5), Box(6)])
             .update(L('boxes').value, L('boxes').value)
             .update(L('boxes').value, np.array([7, 8]))
             ).next_batch(2)
    assert [box.value for box in batch.boxes] == [7, 8]
