"""The action runner and compiled steps, and runs with prefetch, locks, profiling and a progress bar."""
import threading

import pytest

from flowpipe.errors import SkipBatch, StopPipeline
from flowpipe.execution import OrderedLocks, compile_plan
from flowpipe.execution.steps import BatchStep, BuiltinStep, MaybeStep, OrderedStep
from flowpipe.expr import B, R, V
from flowpipe.pipeline import Pipeline

from tests.pipeline.helpers import NumBatch, make_dataset


def _jitter(batch):
    # Finish batches out of order in the workers, so ordering has to come from the locks.
    threading.Event().wait(0.002 * ((7 * int(batch.indices[0])) % 5))


def test_constant_arguments_are_not_marked_for_evaluation():
    records = Pipeline().add(1).scale(B('x')).call(print, save_to=V('x')).init_variable('v').actions
    plan = compile_plan(records, NumBatch, None, 4)
    steps = plan.stages[0]
    assert [type(step) for step in steps] == [BatchStep, BatchStep, BuiltinStep]
    assert [step.dynamic for step in steps] == [False, True, False]


def test_locks_wrap_locked_steps_only_when_prefetching():
    records = Pipeline().add(1).record([]).call(print, use_lock=True).add(2, use_lock=True).actions
    unlocked = compile_plan(records, NumBatch, None, 4)
    assert not unlocked.locked and not any(isinstance(step, OrderedStep) for step in unlocked.stages[0])
    locked = compile_plan(records, NumBatch, OrderedLocks(), 4)
    assert locked.locked
    assert [isinstance(step, OrderedStep) for step in locked.stages[0]] == [False, True, True, True]


def test_writes_are_gated_and_deferral_splits_the_first_stage():
    records = Pipeline().add(1).update(V('x', mode='a'), B.x).scale(2).rebatch(3).add(V('x')).actions
    ordered = compile_plan(records, NumBatch, OrderedLocks(), 4)
    assert ordered.locked and [type(step) for step in ordered.stages[0]] == [BatchStep, OrderedStep, BatchStep]
    assert ordered.stages[0][1].enter is False       # the group is entered at the write itself
    deferred = compile_plan(records, NumBatch, OrderedLocks(), 4, defer=True)
    assert not deferred.locked and [step.name for step in deferred.stages[0]] == ['add']
    assert [step.name for step in deferred.deferred] == ['update', 'scale'] and len(deferred.stages) == 2


def test_maybe_and_rebatch_compile_into_stages():
    records = (Pipeline().add(1) @ 0.5 + Pipeline().rebatch(3).scale(2)).actions
    plan = compile_plan(records, NumBatch, None, 4)
    assert len(plan.stages) == 2 and isinstance(plan.stages[0][0], MaybeStep)
    assert plan.rebatches == [{'batch_size': 3, 'merge': None, 'drop_last': False, 'options': {}}]


def test_locked_action_runs_in_batch_order_with_prefetch():
    store = []
    pipeline = make_dataset(24).p.call(_jitter, B()).record(store)
    pipeline.run(2, prefetch=4)
    assert store == [[i, i + 1] for i in range(0, 24, 2)]


def test_prefetch_gives_the_same_variables_as_no_prefetch():
    def run(prefetch):
        pipeline = (make_dataset(30).p.init_variable('trace', []).call(_jitter, B())
                    .update(V('trace', mode='a'), B().x.sum() + R('integers', 0, 1000), use_lock=True))
        return pipeline.run(3, shuffle=True, seed=4, prefetch=prefetch).v('trace')
    assert run(0) == run(5)


def test_worker_error_reraises_with_type_and_note():
    def fail_at_three(batch):
        if batch.indices[0] == 3:
            raise KeyError('three')
    pipeline = make_dataset(10).p.call(fail_at_three, B())
    with pytest.raises(KeyError, match='three') as info:
        pipeline.run(1, prefetch=3)
    assert any('batch 3' in note for note in info.value.__notes__)


class _WithoutAddNote(KeyError):
    """An exception as Python 3.10 makes them: it has no ``add_note``."""

    @property
    def add_note(self):
        raise AttributeError('add_note')


@pytest.mark.parametrize('prefetch', [0, 3])
def test_an_error_without_add_note_keeps_its_type_and_gets_the_notes(prefetch):
    def fail_at_three(batch):
        if batch.indices[0] == 3:
            raise _WithoutAddNote('three')
    with pytest.raises(_WithoutAddNote, match='three') as info:
        make_dataset(10).p.call(fail_at_three, B()).run(1, prefetch=prefetch)
    assert any('#0 call' in note and 'batch 3' in note for note in info.value.__notes__)


def test_error_leaves_locked_state_at_the_last_completed_batch():
    def fail_at_three(batch):
        if batch.indices[0] == 3:
            raise RuntimeError('stop here')
    pipeline = (make_dataset(20).p.init_variable('done', []).call(_jitter, B()).call(fail_at_three, B())
                .update(V('done', mode='a'), B().indices[0], use_lock=True))
    with pytest.raises(RuntimeError):
        pipeline.run(1, prefetch=6)
    assert pipeline.v('done') == [0, 1, 2]


def test_skip_and_stop_with_prefetch():
    def control(batch):
        if batch.indices[0] == 1:
            raise SkipBatch
        if batch.indices[0] == 4:
            raise StopPipeline
    got = [batch.indices[0] for batch in make_dataset(10).p.call(control, B()).gen_batch(1, prefetch=3)]
    assert got == [0, 2, 3]


def test_leaving_gen_batch_early_stops_the_workers():
    batches = make_dataset(100).p.call(_jitter, B()).gen_batch(1, prefetch=4)
    assert next(batches).indices.tolist() == [0]
    batches.close()


def test_next_batch_with_prefetch_then_reset():
    pipeline = make_dataset(10).p
    assert [pipeline.next_batch(2, prefetch=2).indices[0] for _ in range(3)] == [0, 2, 4]
    pipeline.reset('iter')
    assert pipeline.state.iterator is None


def test_profile_records_time_per_action():
    pipeline = make_dataset(8).p.add(1).scale(2)
    with pytest.raises(ValueError, match='profile=True'):
        pipeline.profile_summary()
    pipeline.run(2, profile=True)
    info = pipeline.profiler.info
    assert list(info) == ['0: add', '1: scale']
    assert info['0: add']['count'] == 4
    assert 'scale' in pipeline.profile_summary()


def test_progress_bar_runs_with_a_total(capsys):
    make_dataset(8).p.add(1).run(2, bar=True)
    assert '4/4' in capsys.readouterr().err
