"""A research on worker processes: failures stay with their experiment, a killed worker is recorded, any
concurrent.futures.Executor runs the tasks."""
import os
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest

from flowpipe.research import EC, Option, Research


def work(x):
    if x == 2:
        raise ValueError('two is bad')
    if x == 3:
        os.kill(os.getpid(), signal.SIGKILL)        # the worker process dies in the middle of the task
    return 10 * x


def build(name):
    return Research(name=name, domain=Option('x', [1, 2, 3, 4])).add_callable('work', work, x=EC('x'), save_to='y')


@pytest.mark.slow
def test_exception_and_killed_worker_are_recorded_others_go_on(tmp_path):
    research = build(str(tmp_path / 'r')).run(workers=2, bar=False)
    assert sorted(row['y'] for row in research.results.rows()) == [10, 40]
    failures = {item['config']['x']: item['traceback'] for item in research.monitor.exceptions}
    assert set(failures) == {2, 3}
    assert 'ValueError: two is bad' in failures[2] and 'WorkerDied' in failures[3]
    assert 'exited with code -9' in failures[3]
    assert os.path.exists(tmp_path / 'r' / 'experiments')


def test_any_executor_runs_the_tasks(tmp_path):
    with ThreadPoolExecutor(2) as pool:
        research = (Research(name=str(tmp_path / 'r'), domain=Option('x', [1, 4]))
                    .add_callable('square', lambda x: x * x, x=EC('x'), save_to='y'))
        research.run(executor=pool, workers=2, devices=['CPU:0', 'CPU:1'], bar=False)
    assert sorted(row['y'] for row in research.results.rows()) == [1, 16]


def test_devices_reach_each_slot(tmp_path):
    research = (Research(name=str(tmp_path / 'r'), domain=Option('x', [1, 2, 3, 4]))
                .add_callable('where', lambda device: device, device=EC('device'), save_to='device'))
    research.run(parallel=False, workers=2, devices=['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3'], bar=False)
    assert sorted(str(row['device']) for row in research.results.rows(use_alias=False)) == \
        ["['CPU:0', 'CPU:1']", "['CPU:0', 'CPU:1']", "['CPU:2', 'CPU:3']", "['CPU:2', 'CPU:3']"]
