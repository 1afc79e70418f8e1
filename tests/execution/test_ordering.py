"""Ordered writes: what each action touches, the ordered groups, and runs whose writes land in batch order."""
import itertools
import threading
import time

import numpy as np
import pytest
import torch

from flowpipe import B, C, Dataset, F, I, ImagesBatch, Pipeline, R, SkipBatch, V
from flowpipe.execution.ordering import Access, access_of, deferred_from, order_units
from flowpipe.models.torch import MLP

from tests.pipeline.helpers import NumBatch, make_dataset

# A hang fails the test instead of the suite.

N_ITEMS, SIZE = 16, 2
N_BATCHES = N_ITEMS // SIZE
WAIT = 10.0


def _late_first(value, c):
    """``value``, later for earlier batches: under prefetch, later batches finish first."""
    time.sleep(0.004 * (N_BATCHES - c % N_BATCHES))
    return value


def _accesses(pipeline, batch_class=NumBatch):
    return [access_of(record, batch_class) for record in pipeline.actions]


# ----- what each action touches -----

def test_access_names_reads_writes_locks_and_model_steps():
    pipeline = (Pipeline().add(V('step')).update(V('x', mode='a'), B.x).call(print, save_to=[B('y'), C('k')])
                .train_model('net', images=B.x).predict_model(C('name'), save_to=B('p')).record([])
                .add(1, use_lock=False).update(V(C('which')), 1, use_lock=True))
    step, write, config, train, predict, record, opted_out, locked = _accesses(pipeline)
    assert step == Access(reads=frozenset({('V', 'step')}))
    assert write.writes == {('V', 'x')} and write.reads == frozenset() and write.gate and write.lock is None
    assert config.writes == {('C', None)}           # the B target is the batch's own
    assert train.writes == {('M', 'net')} and train.model and not train.gate
    assert predict.reads == {('M', None), ('C', None)} and predict.model and not predict.writes
    assert record.lock is True and opted_out.lock is False
    assert locked.writes == {('V', None)} and locked.lock is True and not locked.gate
    assert all(access.stateful for access in (write, config, train, predict, record, locked))
    assert not step.stateful and not opted_out.stateful


def test_a_probability_block_touches_what_its_actions_touch():
    block, = _accesses((Pipeline().add(V('a')).update(V('b'), 1) @ 0.5))
    assert block.reads == {('V', 'a')} and block.writes == {('V', 'b')} and not block.gate


def test_groups_follow_the_state_the_actions_share():
    pipeline = (Pipeline().add(1)                       # touches nothing shared
                .update(V('a', mode='a'), B.x)          # writes a only: enters its group at the write
                .scale(V('b'))                          # reads b, which a later action writes: joins b's group
                .add(2)                                 # inside b's group span, not a member
                .update(V('b'), V('b') + 1)             # reads what its group writes: enters before the action
                .record([])                             # use_lock=True: a group of its own
                .update(V('c'), 1, use_lock=False))     # opted out: finish order
    orderings = order_units(_accesses(pipeline), itertools.count(5))
    assert [None if o is None else (o.key, o.at_write, o.leave) for o in orderings] == [
        None, (5, True, True), (6, False, False), None, (6, False, True), (7, False, True), None]


def test_readers_of_unwritten_state_and_opted_out_writers_form_no_group():
    pipeline = Pipeline().add(V('a')).add(C('size')).update(V('a'), 1, use_lock=False)
    assert order_units(_accesses(pipeline), itertools.count()) == [None, None, None]


@pytest.mark.parametrize('pipeline, position', [
    (Pipeline().add(1).scale(2), 2),
    (Pipeline().add(1).scale(2).update(V('a'), 1).add(3), 2),
    (Pipeline().add(V('a')).scale(2).update(V('a'), 1), 0),            # reads what a later action writes
    (Pipeline().add(1).predict_model('net', images=B.x), 1),           # a model step, even one that only reads
    (Pipeline().add(1).update(V('a'), 1, use_lock=False).add(2), 1),   # a write, even an unordered one
    (Pipeline().add(1).record([]), 1),
    (Pipeline().add(1).add(V('size')).join(Pipeline()).add(2), 2),
])
def test_the_first_stateful_action_is_where_the_caller_takes_over(pipeline, position):
    assert deferred_from(_accesses(pipeline)) == position


# ----- runs -----

@pytest.mark.parametrize('prefetch', [0, 2, 4])
def test_writes_land_in_batch_order_without_use_lock(prefetch):
    def run(prefetch):
        pipeline = (make_dataset(N_ITEMS).p.init_variable('appended', []).init_variable('extended', [])
                    .update(V('appended', mode='a'), F(_late_first)(I('c'), I('c')))
                    .update(V('extended', mode='e'), F(_late_first)(B.indices.tolist(), I('c')))
                    .call(_late_first, R('integers', 0, 1000), I('c'), save_to=V('draws', mode='a'))
                    .update(V('last'), F(_late_first)(I('c'), I('c'))))
        pipeline.run(SIZE, prefetch=prefetch, seed=3)
        return {name: pipeline.v(name) for name in ('appended', 'extended', 'draws', 'last')}
    got = run(prefetch)
    assert got['appended'] == list(range(N_BATCHES)) and got['extended'] == list(range(N_ITEMS))
    assert got['last'] == N_BATCHES - 1
    assert got == run(0)


def test_only_the_write_waits_for_its_turn():
    computed, waited = threading.Event(), []

    def value(c):
        if c == 1:
            computed.set()
        if c == 0:          # batch 1 computes its value while batch 0 still computes its own
            waited.append(computed.wait(WAIT))
        return c
    pipeline = make_dataset(4).p.init_variable('order', []).update(V('order', mode='a'), F(value)(I('c')))
    pipeline.run(1, prefetch=2)
    assert waited == [True] and pipeline.v('order') == [0, 1, 2, 3]


def test_use_lock_false_keeps_the_order_batches_finish_in():
    second_written = threading.Event()

    def value(c):
        if c == 0:
            second_written.wait(WAIT)
        return c

    def written(c):
        if c == 1:
            second_written.set()
    pipeline = (make_dataset(4).p.init_variable('order', [])
                .update(V('order', mode='a'), F(value)(I('c')), use_lock=False)
                .call(written, I('c')))
    pipeline.run(1, prefetch=2)
    assert pipeline.v('order') == [1, 0, 2, 3]


@pytest.mark.parametrize('prefetch', [0, 2, 4])
def test_reads_of_a_written_variable_see_what_a_run_without_prefetch_sees(prefetch):
    pipeline = (make_dataset(N_ITEMS).p.init_variable('total', 0).init_variable('history', [])
                .update(V('total'), V('total') + F(_late_first)(B.size, I('c')))    # read-modify-write
                .update(B('seen'), V('total'))                                     # this batch's own write
                .update(V('history', mode='a'), F(tuple)([I('c'), B.seen])))
    pipeline.run(SIZE, prefetch=prefetch)
    assert pipeline.v('total') == N_ITEMS
    assert pipeline.v('history') == [(c, SIZE * (c + 1)) for c in range(N_BATCHES)]


def test_skipped_and_failed_batches_neither_block_nor_reorder_the_writes():
    def control(c):
        if c in (1, 4):
            raise SkipBatch
        if c == 6:
            raise RuntimeError('stop')
        return _late_first(c, c)
    pipeline = make_dataset(N_ITEMS).p.init_variable('done', []).update(V('done', mode='a'), F(control)(I('c')))
    with pytest.raises(RuntimeError, match='stop'):
        pipeline.run(SIZE, prefetch=4)
    assert pipeline.v('done') == [0, 2, 3, 5]      # batch 7, prefetched, never writes


@pytest.mark.parametrize('prefetch', [0, 2, 4])
def test_writes_before_and_after_a_rebatch_and_with_a_join(prefetch):
    def pair(other, batch, c):
        return _late_first((int(batch.indices[0]), int(other.indices[0])), c)
    pipeline = (make_dataset(N_ITEMS).p.init_variable('first', []).init_variable('pairs', [])
                .join(make_dataset(N_ITEMS).p).call(pair, B(), I('c'), save_to=V('pairs', mode='a'))
                .update(V('first', mode='a'), F(_late_first)(I('c'), I('c')))
                .rebatch(4).update(V('second', mode='a'), B.indices.tolist()))
    pipeline.run(SIZE, prefetch=prefetch)
    assert pipeline.v('first') == list(range(N_BATCHES))
    assert pipeline.v('pairs') == [(i, i) for i in range(0, N_ITEMS, SIZE)]
    assert pipeline.v('second') == [list(range(i, i + 4)) for i in range(0, N_ITEMS, 4)]


# ----- model steps -----

def _images():
    rng = np.random.default_rng(0)
    return Dataset(N_ITEMS, batch_class=ImagesBatch, num_classes=3,
                   preloaded={'images': rng.random((N_ITEMS, 1, 4, 4), dtype=np.float32),
                              'labels': rng.integers(0, 3, N_ITEMS)})


def _model(pipeline):
    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': 3, 'initial_block/inputs': 'images'}
    return (Pipeline().init_variable('out', []).init_model('dynamic', MLP, 'mlp', config=config)
            .update(B.images, F(_late_first)(B.images, I('c'))) + pipeline) << _images()


@pytest.mark.parametrize('prefetch', [0, 2, 4])
def test_predictions_saved_under_prefetch_stay_aligned_with_their_items(prefetch):
    pipeline = _model(Pipeline().predict_model('mlp', images=B.images, save_to=V('out', mode='e'))
                      .update(V('items', mode='e'), B.indices.tolist()))
    pipeline.run(SIZE, prefetch=prefetch, seed=1)
    assert pipeline.v('items') == list(range(N_ITEMS))
    expected = pipeline.m('mlp').predict(images=_images().preloaded['images'])
    np.testing.assert_allclose(np.stack(pipeline.v('out')), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('prefetch', [2, 4])
def test_train_model_without_use_lock_trains_as_a_run_without_prefetch(prefetch):
    def run(prefetch):
        pipeline = _model(Pipeline().train_model('mlp', fetches='loss', images=B.images, labels=B.labels,
                                                 save_to=V('out', mode='a')))
        pipeline.run(SIZE, prefetch=prefetch, seed=1, n_epochs=2)
        return pipeline.v('out'), [p.detach().clone() for p in pipeline.m('mlp').model.parameters()]
    losses, params = run(prefetch)
    losses0, params0 = run(0)
    assert len(losses) == 2 * N_BATCHES and losses == losses0
    assert all(torch.equal(a, b) for a, b in zip(params, params0))
