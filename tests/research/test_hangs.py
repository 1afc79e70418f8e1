"""A hanging experiment: ended at the research's timeout=, named when it runs far longer than the others, and
its worker ends with a killed caller."""
import multiprocessing
import os
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from flowpipe.research import EC, Option, Research
from flowpipe.research import scheduler

from ..killed_caller import worker_ends_with_killed_caller
from .test_grid import _wait


def hang_at_two(x):
    if x == 2:
        threading.Event().wait()                  # forever
    return 10 * x


def wait_at_two_for(x, flag):
    if x == 2:
        while not os.path.exists(flag):
            time.sleep(0.05)
    return 10 * x


def _research(name, unit, **kwargs):
    return Research(name=name, domain=Option('x', [1, 2, 3, 4])).add_callable('f', unit, x=EC('x'), save_to='y',
                                                                               **kwargs)


def _research_workers():
    return [child for child in multiprocessing.active_children() if child.name.startswith('flowpipe-research')]


@pytest.mark.slow
def test_an_experiment_past_its_timeout_is_recorded_as_failed_and_the_others_go_on_in_a_new_worker(tmp_path):
    research = _research(str(tmp_path / 'r'), hang_at_two).run(workers=1, timeout=10, bar=False)
    assert sorted(row['y'] for row in research.results.rows()) == [10, 30, 40]      # 3 and 4 ran after the hang
    [failure] = research.monitor.exceptions
    assert failure['config']['x'] == 2 and 'ExperimentTimeout' in failure['traceback']
    assert 'Expected the experiment to finish within timeout=10 s' in failure['traceback']
    assert (tmp_path / 'r' / 'experiments' / failure['id'] / 'error.txt').exists()
    assert not _research_workers()


@pytest.mark.slow
def test_an_experiment_running_far_longer_than_the_others_is_named_once(tmp_path, monkeypatch):
    monkeypatch.setattr(scheduler, 'SLOW_SECONDS', 1.0)
    flag = tmp_path / 'release'
    research = _research(str(tmp_path / 'r'), wait_at_two_for, flag=str(flag))

    def named():
        return [line for line in getattr(research.storage, 'log', []) if 'may hang' in line]

    def release():            # the slow experiment ends once it is named (or after the bound: the test fails)
        _wait(lambda: named(), 200)
        flag.touch()
    releaser = threading.Thread(target=release, daemon=True)
    releaser.start()
    with pytest.warns(RuntimeWarning, match='may hang'):
        research.run(workers=2, bar=False)
    releaser.join()
    slow = research.results.rows(x=2)[0]['id']
    assert sorted(row['y'] for row in research.results.rows()) == [10, 20, 30, 40]
    assert [line for line in named() if slow in line] == named()[:1] and 'x_2' in named()[0]


@pytest.mark.slow
def test_a_worker_in_a_hung_experiment_ends_with_its_killed_caller(tmp_path):
    assert worker_ends_with_killed_caller(tmp_path, textwrap.dedent(f'''
        from flowpipe.research import Research
        Research({str(tmp_path / 'r')!r}).add_callable('hang', hang).run(workers=1, bar=False)
    '''))


@pytest.mark.parametrize('kwargs, match', [
    ({'timeout': 0}, 'seconds > 0'), ({'timeout': 'long'}, 'seconds > 0'),
    ({'timeout': 5, 'parallel': False}, 'parallel=False'),
    ({'timeout': 5, 'executor': ThreadPoolExecutor(1)}, 'only the local pool'),
])
def test_a_timeout_is_refused_where_no_worker_can_be_ended(kwargs, match):
    with pytest.raises(ValueError, match=match):
        _research('r', hang_at_two).run(bar=False, dump_results=False, **kwargs)
