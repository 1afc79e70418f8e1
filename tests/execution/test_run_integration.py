"""How a run drives the progress bar, the profiler and the prefetcher."""
import pytest

from flowpipe.execution import run as run_module

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
    monkeypatch.setattr(run_module, 'Prefetcher', broken)
    with pytest.raises(RuntimeError, match='no workers today'):
        make_dataset().p.run(3, bar=RecordingBar, prefetch=2)
    assert bars == []
