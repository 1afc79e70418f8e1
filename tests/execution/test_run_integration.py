"""How a run drives the progress bar, the profiler and the prefetcher."""
import pytest

from flowpipe.execution import run_loop
from flowpipe.expr import B, R, V

from tests.pipeline.helpers import make_dataset


class RecordingBar:
    """A tqdm-like bar class that remembers every postfix it was given."""
    made: list = []

    def __init__(self, total=None, **options):
        self.total, self.postfixes, self.closed = total, [], False
        RecordingBar.made.append(self)

    def set_postfix(self, postfix, refresh=True):
        self.postfixes.append(dict(postfix))

    def update(self, n=1):
        pass

    def close(self):
        self.closed = True


@pytest.fixture
def bars():
    RecordingBar.made = []
    return RecordingBar.made


def test_bar_shows_no_ready_count_without_prefetch(bars):
    make_dataset().p.run(3, bar={'bar': RecordingBar, 'monitors': []})
    assert len(bars) == 1 and bars[0].closed
    assert bars[0].postfixes == []


def test_bar_shows_the_ready_count_with_prefetch(bars):
    make_dataset().p.run(3, bar=RecordingBar, prefetch=2)
    assert len(bars[0].postfixes) == 4
    assert all(set(postfix) == {'ready'} for postfix in bars[0].postfixes)


def test_no_bar_is_opened_when_the_prefetcher_cannot_be_built(bars, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError('no workers today')
    monkeypatch.setattr(run_loop, 'Prefetcher', broken)
    with pytest.raises(RuntimeError, match='no workers today'):
        make_dataset().p.run(3, bar=RecordingBar, prefetch=2)
    assert bars == []


def test_profiled_run_exposes_stats_rows_profiler_and_a_table():
    pipeline = make_dataset().p.add(1).rebatch(4).scale(2).add(3)
    assert pipeline.profiler is None and pipeline.profile_rows is None and pipeline.profile_info is None
    pipeline.run(3, profile=True)
    # Steps are numbered through the whole run, so the two `add`s of different stages stay apart.
    assert list(pipeline.profile_info.index) == ['0: add', '1: scale', '2: add']
    assert list(pipeline.profile_info['count']) == [4, 3, 3]
    rows = pipeline.profile_rows
    assert len(rows) == 10 and set(rows[0]) == {'batch', 'action', 'seconds'}
    assert [row['batch'] for row in rows if row['action'] == '0: add'] == [0, 1, 2, 3]
    assert pipeline.profiler.rows == rows
    table = pipeline.profile_summary().splitlines()
    assert table[0].split() == ['action', 'count', 'total,', 's', 'mean,', 'ms', 'max,', 'ms', 'share']
    assert [line.split()[:3] for line in table[1:]] == [['0:', 'add', '4'], ['1:', 'scale', '3'], ['2:', 'add', '3']]


def test_profile_summary_before_a_profiled_run_says_how_to_get_one():
    with pytest.raises(ValueError, match='profile=True'):
        make_dataset().p.add(1).profile_summary()


def test_processes_target_gives_the_batches_of_a_threaded_run_and_reads_variables_as_the_run_starts():
    pipeline = (make_dataset().p.init_variable('offset', 5).add(R('integers', 0, 100)).scale(2)
                .update(B('shifted'), B('x') + V('offset')))
    batches = list(pipeline.gen_batch(3, prefetch=2, seed=4, target='processes'))
    threaded = [(batch.x.tolist(), batch.shifted.tolist()) for batch in pipeline.gen_batch(3, prefetch=2, seed=4)]
    assert [(batch.x.tolist(), batch.shifted.tolist()) for batch in batches] == threaded
    assert all(batch.dataset is pipeline.dataset for batch in batches)


@pytest.mark.parametrize('chain, named', [
    (lambda p: p.add(1).update(V('n'), 1, use_lock=True), 'update'),
    (lambda p: p.add(1).update(V('n', mode='a'), 1), 'update'),          # the write would be lost
    (lambda p: p.call(divmod, B('x'), 2, save_to=[B('y'), V('n')], use_lock=False), 'call'),
    (lambda p: p.record([]), 'record'),
    (lambda p: p.init_model('net', object), 'init_model'),
    (lambda p: (p.add(1) @ 0.5).scale(2).join(make_dataset().p).absorb(), 'join'),
])
def test_processes_target_refuses_actions_whose_state_cannot_come_back(chain, named):
    pipeline = chain(make_dataset().p)
    with pytest.raises(ValueError, match=rf"target='processes'.*{named}\("):
        pipeline.run(3, prefetch=2, target='processes')
    pipeline.run(3, target='processes')   # without prefetch nothing leaves the caller's thread


def test_processes_target_allows_shared_state_after_a_rebatch_and_refuses_profiling():
    pipeline = make_dataset().p.add(1).rebatch(5).update(V('n'), 1, use_lock=True)
    with pytest.raises(ValueError, match='profile=False'):
        pipeline.run(3, prefetch=2, target='processes', profile=True)
    with pytest.raises(ValueError, match="target to be one of"):
        pipeline.run(3, prefetch=2, target='gpu')
