"""Profiler: thread-safe recording, per-action statistics, rows, table."""
import random
import threading
import time

import pytest

from flowpipe.execution.profile import Profiler

# A hang fails the test instead of the suite.


def test_info_aggregates_per_action_in_first_seen_order():
    profiler = Profiler()
    for seq, (load, train) in enumerate([(0.1, 0.5), (0.3, 0.7)]):
        profiler.record('load', seq, load)
        profiler.record('train_model', seq, train)
    info = profiler.info
    assert list(info) == ['load', 'train_model']
    assert info['load']['count'] == 2
    assert info['load']['total'] == pytest.approx(0.4)
    assert info['load']['mean'] == pytest.approx(0.2)
    assert info['train_model']['max'] == pytest.approx(0.7)


def test_rows_are_ordered_by_batch():
    profiler = Profiler()
    profiler.record('a', 1, 0.1)
    profiler.record('a', 0, 0.2)
    profiler.record('b', 0, 0.3)
    assert profiler.rows == [{'batch': 0, 'action': 'a', 'seconds': 0.2},
                             {'batch': 0, 'action': 'b', 'seconds': 0.3},
                             {'batch': 1, 'action': 'a', 'seconds': 0.1}]


def test_recording_from_many_threads_loses_nothing():
    profiler = Profiler()

    def work(worker):
        for seq in range(2000):
            profiler.record(f'action{worker % 2}', seq, 0.001)

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(profiler) == 8000
    assert profiler.info['action0']['count'] == profiler.info['action1']['count'] == 4000


def test_timer_records_the_block():
    profiler = Profiler()
    with profiler.timer('resize', 3):
        sum(range(1000))
    (row,) = profiler.rows
    assert row['batch'] == 3 and row['action'] == 'resize' and row['seconds'] >= 0.0


def test_summary_table():
    profiler = Profiler()
    assert 'profile=True' in profiler.summary()
    profiler.record('resize', 0, 0.25)
    profiler.record('train_model', 0, 0.75)
    lines = profiler.summary().splitlines()
    assert lines[0].split()[:2] == ['action', 'count']
    assert lines[1].split()[0] == 'resize' and '25.0%' in lines[1]
    assert lines[2].split()[0] == 'train_model' and '75.0%' in lines[2]
    assert 'resize' in repr(profiler)
    profiler.clear()
    assert len(profiler) == 0 and profiler.info == {}


def test_to_frame():
    profiler = Profiler()
    profiler.record('resize', 0, 0.25)
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match='pip install pandas'):
            profiler.to_frame()
    else:
        frame = profiler.to_frame()
        assert list(frame.columns) == ['batch', 'action', 'seconds'] and len(frame) == 1


def test_detailed_profile_tables():
    pd = pytest.importorskip('pandas')
    from flowpipe import B, Dataset
    pipeline = Dataset(6).p.call(lambda batch: sorted(range(100), reverse=True), B()).do_nothing()
    pipeline.run(2, profile='detailed')
    assert set(pipeline.profile_info.index) == {'0: call', '1: do_nothing'}
    over = pipeline.show_profile_info()
    assert list(over.columns) == [('total_time', 'sum'), ('total_time', 'mean'), ('total_time', 'max')]
    assert len(pipeline.show_profile_info(per_iter=True)) == 6
    functions = pipeline.show_profile_info(detailed=True, limit=2)
    assert isinstance(functions, pd.DataFrame) and functions.index.names == ['action', 'id']
    assert functions.groupby(level='action').size().max() <= 2
    everything = pipeline.show_profile_info(detailed=True, limit=None)
    assert any('sorted' in name for name in everything.loc['0: call'].index)
    per_batch = pipeline.show_profile_info(per_iter=True, detailed=True, sortby='ncalls', limit=1)
    assert per_batch.index.names == ['iter', 'action', 'id'] and len(per_batch) == 6
    plain = Dataset(6).p.do_nothing()
    plain.run(2, profile=True)
    with pytest.raises(ValueError, match="profile='detailed'"):
        plain.show_profile_info(detailed=True)
    with pytest.raises(ValueError, match='profile=True'):
        Dataset(6).p.show_profile_info()


def _jitter(seq):
    time.sleep(random.Random(seq).random() * 0.02)


def test_detailed_profile_with_prefetch_and_ordered_writes_finishes():
    """A profiled action waiting for an earlier batch's ordered write must not stop that batch's actions."""
    from flowpipe import I, V, Dataset, Pipeline
    pipeline = (Pipeline().init_variable('n', 0).call(_jitter, I('c')).update(V('n'), V('n') + 1)) << Dataset(40)
    pipeline.run(2, prefetch=4, profile='detailed')
    assert pipeline.v('n') == 20
    assert [entry['count'] for entry in pipeline.profiler.info.values()] == [20, 20]
