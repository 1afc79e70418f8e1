"""run / gen_batch / next_batch through whole pipelines."""
import threading
import time

import numpy as np
import pytest

from flowpipe import Dataset, ImagesBatch
from flowpipe.errors import SkipBatch, StopPipeline, UnknownActionError
from flowpipe.expr import B, C, I, V
from flowpipe.models.torch import MLP
from flowpipe.pipeline import Pipeline

from tests.pipeline.helpers import make_dataset


def _indices(pipeline, **kwargs):
    return [batch.indices.tolist() for batch in pipeline.gen_batch(**kwargs)]


def test_run_returns_pipeline_and_processes_every_batch():
    pipeline = make_dataset().p.init_variable('sizes', []).update(V('sizes', mode='a'), B().size)
    assert pipeline.run(4) is pipeline
    assert pipeline.v('sizes') == [4, 4, 2]


def test_gen_batch_yields_processed_batches():
    batches = list(make_dataset().p.add(10).scale(2).gen_batch(5))
    assert [batch.x.tolist() for batch in batches] == [[20, 22, 24, 26, 28], [30, 32, 34, 36, 38]]


def test_epoch_crossing_order_without_drop_last():
    pipeline = make_dataset(5).p
    assert _indices(pipeline, batch_size=2, n_epochs=2) == [[0, 1], [2, 3], [4, 0], [1, 2], [3, 4]]
    assert _indices(pipeline, batch_size=2, n_epochs=2, drop_last=True) == [[0, 1], [2, 3], [0, 1], [2, 3]]


def test_n_iters_limits_the_run():
    assert len(_indices(make_dataset().p, batch_size=3, n_iters=7)) == 7


def test_append_mode_variable_and_progress_ratio():
    pipeline = (make_dataset().p.init_variable('ratios', []).init_variable('counts', [])
                .update(V('ratios', mode='a'), I('r')).update(V('counts', mode='a'), I('c')))
    pipeline.run(3, n_epochs=1)
    assert pipeline.v('ratios') == [0.25, 0.5, 0.75, 1.0]
    assert pipeline.v('counts') == [0, 1, 2, 3]


def test_call_passes_the_batch_and_saves_the_result():
    pipeline = make_dataset().p.init_variable('sums', []).call(lambda batch, k: int(batch.x.sum()) * k, B(), 2,
                                                                save_to=V('sums', mode='a'))
    pipeline.run(5)
    assert pipeline.v('sums') == [20, 70]


def test_config_expressions_come_from_the_bound_config():
    template = Pipeline().add(C('step'))
    batch = (template << make_dataset() << {'step': 100}).next_batch(3)
    assert batch.x.tolist() == [100, 101, 102]


def test_variables_persist_across_runs_until_reset():
    pipeline = make_dataset().p.init_variable('n', 0).update(V('n'), V('n') + 1)
    pipeline.run(5)
    pipeline.run(5)
    assert pipeline.v('n') == 4
    pipeline.run(5, reset='variables')
    assert pipeline.v('n') == 2


def test_template_is_reusable_after_lshift():
    template = Pipeline().init_variable('seen', []).update(V('seen', mode='e'), B().indices.tolist())
    first, second = template << make_dataset(4), template << make_dataset(6)
    first.run(2)
    second.run(3)
    assert first.v('seen') == [0, 1, 2, 3] and second.v('seen') == list(range(6))
    assert (template << make_dataset(2)).run(1).v('seen') == [0, 1]


def test_next_batch_keeps_an_infinite_iterator():
    pipeline = make_dataset(5).p
    got = [pipeline.next_batch(2).indices.tolist() for _ in range(4)]
    assert got == [[0, 1], [2, 3], [4, 0], [1, 2]]
    pipeline.reset('iter')
    assert pipeline.next_batch(2).indices.tolist() == [0, 1]


def test_next_batch_with_a_limit_stops():
    pipeline = make_dataset(4).p
    assert pipeline.next_batch(3, n_epochs=1).size == 3
    assert pipeline.next_batch(3, n_epochs=1).size == 1
    with pytest.raises(StopIteration):
        pipeline.next_batch(3, n_epochs=1)


def test_new_arguments_restart_next_batch():
    pipeline = make_dataset(6).p
    pipeline.next_batch(2)
    assert pipeline.next_batch(3).indices.tolist() == [0, 1, 2]


@pytest.mark.parametrize('prefetch', [0, 2])
def test_next_batch_after_a_failing_batch_names_it_until_reset(prefetch):
    def check(batch):
        if 4 in batch.indices:
            raise ValueError('item 4 is broken')
    pipeline = make_dataset(10).p.call(check, B())
    assert [pipeline.next_batch(2, prefetch=prefetch).indices.tolist() for _ in range(2)] == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match='item 4 is broken') as failed:
        pipeline.next_batch(2, prefetch=prefetch)
    assert "iteration at its batch #2" in failed.value.__notes__[-1]
    for _ in range(2):                             # a loop that catches and goes on is told, not ended silently
        with pytest.raises(RuntimeError, match=r"batch #2 .*item 4 is broken.*reset='iter'") as again:
            pipeline.next_batch(2, prefetch=prefetch)
        assert again.value.__cause__ is failed.value
    assert _wait_until(lambda: not _prefetch_threads())     # the failed iteration's workers are gone
    assert pipeline.next_batch(2, prefetch=prefetch, reset='iter').indices.tolist() == [0, 1]


def test_lazy_run_stores_arguments_in_a_new_pipeline():
    template = make_dataset().p.init_variable('n', 0).update(V('n'), V('n') + 1)
    lazy = template.run(5, n_epochs=2, lazy=True)
    assert lazy is not template and template.run_args is None
    assert template.v('n') == 0 and lazy.v('n') == 0
    lazy.run()
    assert lazy.v('n') == 4
    lazy.run(n_iters=1)
    assert lazy.v('n') == 5
    assert lazy.next_batch().size == 5


def test_bad_run_arguments_fail_before_any_batch():
    with pytest.raises(ValueError, match='dataset'):
        Pipeline().run(2)
    with pytest.raises(ValueError, match='batch_size'):
        make_dataset().p.run()
    with pytest.raises(ValueError, match='prefetch'):
        make_dataset().p.run(2, prefetch=-1)
    with pytest.raises(TypeError, match='batch_size'):
        make_dataset().p.run(2.5)


class _PlainDataset:
    """A dataset that does not tell its batch class, so actions are checked on the first batch."""

    def __init__(self, dataset):
        self.index, self.create_batch = dataset.index, dataset.create_batch


def test_unknown_action_without_known_batch_class_fails_at_first_batch():
    pipeline = Pipeline().scael(2) << _PlainDataset(make_dataset())
    with pytest.raises(UnknownActionError, match="'scale'"):
        pipeline.next_batch(2)
    assert (Pipeline().scale(2) << _PlainDataset(make_dataset())).next_batch(2).x.tolist() == [0, 2]


def test_adding_to_a_bound_pipeline_checks_the_names():
    with pytest.raises(UnknownActionError, match="'scale'"):
        make_dataset().p + Pipeline().scael(2)


def test_skip_batch_drops_the_batch():
    def skip_odd(batch):
        if batch.indices[0] % 2:
            raise SkipBatch
    pipeline = make_dataset(6).p.call(skip_odd, B())
    assert _indices(pipeline, batch_size=1) == [[0], [2], [4]]


def test_stop_pipeline_ends_the_run_cleanly():
    def stop_at_two(batch):
        if batch.indices[0] == 2:
            raise StopPipeline
    pipeline = make_dataset(6).p.call(stop_at_two, B()).after.init_variable('x', 0)
    assert _indices(pipeline, batch_size=1) == [[0], [1]]


def test_error_keeps_type_and_traceback_and_names_action_and_batch():
    pipeline = make_dataset(6).p.add(1).fail('bad value')
    with pytest.raises(RuntimeError, match='bad value') as info:
        pipeline.run(2)
    notes = '\n'.join(info.value.__notes__)
    assert "#1 fail('bad value')" in notes and 'batch 0' in notes
    assert any(entry.name == 'fail' for entry in info.traceback)


def test_shuffle_is_reproducible_with_a_seed():
    pipeline = make_dataset(20).p
    first = _indices(pipeline, batch_size=5, shuffle=True, seed=3)
    assert first == _indices(pipeline, batch_size=5, shuffle=True, seed=3)
    assert first == _indices(pipeline, batch_size=5, shuffle=3)
    assert sorted(np.concatenate(first).tolist()) == list(range(20))


def test_unknown_run_keyword_names_the_argument():
    with pytest.raises(TypeError, match='shufle'):
        make_dataset().p.run(2, shufle=True)


def test_interrupt_leaves_variables_at_the_last_completed_batch_and_pipeline_usable():
    def interrupt(batch):
        if batch.indices[0] == 4:
            raise KeyboardInterrupt
    pipeline = make_dataset(8).p.init_variable('done', []).call(interrupt, B()).update(
        V('done', mode='e'), B().indices.tolist())
    with pytest.raises(KeyboardInterrupt):
        pipeline.run(2)
    assert pipeline.v('done') == [0, 1, 2, 3]
    assert pipeline.run(2, n_iters=1).v('done') == [0, 1, 2, 3, 0, 1]


def test_error_in_a_section_names_the_section():
    pipeline = make_dataset(4).p.after.call(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError) as info:
        pipeline.run(2)
    assert any('before/after section' in note for note in info.value.__notes__)


def test_reset_models_and_all():
    pipeline = make_dataset(4).p.init_variable('x', 1)
    pipeline.models['net'] = object()
    pipeline.set_variable('x', 2)
    pipeline.reset('models')
    assert 'net' not in pipeline.models and pipeline.v('x') == 2
    pipeline.models['net'] = object()
    pipeline.next_batch(2)
    pipeline.reset('all')
    assert not pipeline.models and pipeline.v('x') == 1 and pipeline.state.iterator is None


def test_dir_lists_actions():
    names = dir(make_dataset().p)
    assert {'add', 'scale', 'init_variable', 'call', 'run'} <= set(names)


def test_total_is_known_for_n_iters():
    pipeline = make_dataset(10).p.init_variable('m', []).update(V('m', mode='a'), I('m'))
    assert pipeline.run(4, n_iters=3).v('m') == [3, 3, 3]


# ----- what runs ahead of the caller -----

def _prefetch_threads():
    return [thread for thread in threading.enumerate() if thread.name.startswith('flowpipe-')]


def _wait_until(condition):
    deadline = time.monotonic() + 120.0
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def _training(prepared):
    rng = np.random.default_rng(0)
    dataset = Dataset(24, batch_class=ImagesBatch, preloaded={'images': rng.random((24, 1, 4, 4), dtype=np.float32),
                                                               'labels': rng.integers(0, 3, 24)})
    config = {'inputs/images/shape': (1, 4, 4), 'inputs/labels/classes': 3, 'initial_block/inputs': 'images'}
    return (Pipeline().init_variable('loss', []).init_model('dynamic', MLP, 'mlp', config=config)
            .call(lambda c: prepared.append(c), I('c'))                  # preprocessing: may run ahead
            .train_model('mlp', fetches='loss', images=B.images, labels=B.labels, save_to=V('loss', mode='a'))
            ) << dataset


@pytest.mark.parametrize('prefetch', [1, 3])
def test_next_batch_never_trains_ahead_of_the_caller(prefetch):
    prepared = []
    pipeline = _training(prepared)
    for asked in range(1, 5):
        pipeline.next_batch(2, prefetch=prefetch, seed=0)
        assert pipeline.m('mlp').iteration == asked and len(pipeline.v('loss')) == asked
    # Preprocessing ran ahead meanwhile, up to `prefetch` batches.
    assert _wait_until(lambda: len(prepared) == 4 + prefetch - 1) and pipeline.m('mlp').iteration == 4
    sequential = _training([])
    for _ in range(4):
        sequential.next_batch(2, seed=0)
    assert pipeline.v('loss') == sequential.v('loss')


def test_gen_batch_never_trains_ahead_of_the_caller():
    prepared = []
    pipeline = _training(prepared)
    for asked, _ in enumerate(pipeline.gen_batch(2, prefetch=3, seed=0), 1):
        assert pipeline.m('mlp').iteration == asked
        if asked == 3:
            break
    assert pipeline.m('mlp').iteration == 3 and not _prefetch_threads()


def test_next_batch_workers_end_when_the_pipeline_is_reset_or_dropped():
    pipeline = make_dataset(20).p.add(1).update(V('seen', mode='e'), B.indices.tolist())
    pipeline.next_batch(2, prefetch=3)
    assert _prefetch_threads()
    pipeline.reset('iter')
    assert not _prefetch_threads() and pipeline.v('seen') == [0, 1]
    pipeline.next_batch(2, prefetch=3)
    assert pipeline.next_batch(2, prefetch=3).indices.tolist() == [2, 3] and pipeline.v('seen') == [0, 1, 0, 1, 2, 3]
    del pipeline                # no gc.collect(): nothing but the user held it
    assert _wait_until(lambda: not _prefetch_threads())


def test_control_flow_and_errors_in_the_actions_the_caller_runs():
    def control(c):
        if c == 1:
            raise SkipBatch
        if c == 3:
            raise KeyError('three')
        if c == 5:
            raise StopPipeline
    pipeline = make_dataset(20).p.add(1).update(V('seen', mode='a'), I('c')).call(control, I('c'))
    batches = pipeline.gen_batch(1, prefetch=2)
    assert [next(batches).indices[0] for _ in range(2)] == [0, 2]
    with pytest.raises(KeyError, match='three') as info:
        next(batches)
    assert any('#2 call' in note and 'batch 3' in note for note in info.value.__notes__)
    assert pipeline.v('seen') == [0, 1, 2, 3] and not _prefetch_threads()
    stopped = (make_dataset(20).p.add(1).update(V('seen', mode='a'), I('c')).call(control, I('c') + 4)
               .after.update(V('closed'), True))
    assert [batch.indices[0] for batch in stopped.gen_batch(1, prefetch=2)] == [0]
    assert stopped.v('seen') == [0, 1] and stopped.v('closed') is True
