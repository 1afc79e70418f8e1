"""The Done-means case: a Digits grid (2 learning rates x 2 micro-batch sizes x 2 repetitions) on 2 workers over 2
logical devices gives, per experiment, what that config gives alone with the same seed; killed halfway (SIGKILL
to the caller) and run again, it reruns only the unfinished experiments and ends with the same table."""
import os
import signal
import subprocess
import sys
import time

import pytest

from flowpipe.research import Domain, Research

from .grid import N_ITERS, SEED, make_research, table

pytestmark = pytest.mark.slow
GRID = os.path.join(os.path.dirname(__file__), 'grid.py')


def _env():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return {**os.environ, 'PYTHONPATH': root + os.pathsep + os.environ.get('PYTHONPATH', '')}


def test_grid_on_two_workers_matches_each_config_alone(tmp_path):
    research = make_research(str(tmp_path / 'grid'))
    research.run(n_iters=N_ITERS, workers=2, devices=['CPU:0', 'CPU:1'], seed=SEED, bar=False)
    assert not research.monitor.exceptions and research.monitor.finished == 8
    rows = table(research)
    assert len(rows) == 8 * N_ITERS
    assert len({row[4] for row in rows if row[3] == 0}) == 8        # repetitions differ: seeds per experiment
    for lr, microbatch in [(0.05, 4), (0.2, 8)]:
        alone = make_research(str(tmp_path / f'alone_{lr}_{microbatch}'),
                              domain=Domain({'lr': [lr]}) * Domain({'microbatch': [microbatch]}))
        alone.run(n_iters=N_ITERS, parallel=False, devices=['CPU:0'], seed=SEED, bar=False)
        mine = [row for row in rows if row[1] == str(lr) and row[2] == str(microbatch)]
        assert table(alone) == mine                                   # bit-identical losses, same ids


def _finished(folder):
    experiments = os.path.join(folder, 'experiments')
    if not os.path.isdir(experiments):
        return set()
    return {name for name in os.listdir(experiments) if os.path.exists(os.path.join(experiments, name, 'record.dill'))}


def _wait(predicate, seconds=240.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_killed_caller_then_rerun_ends_with_same_table(tmp_path):
    psutil = pytest.importorskip('psutil')
    folder = str(tmp_path / 'grid')
    caller = subprocess.Popen([sys.executable, GRID, folder, '2', '1.5'], env=_env())
    try:
        assert _wait(lambda: len(_finished(folder)) >= 2), 'no experiment finished'
        workers = psutil.Process(caller.pid).children(recursive=True)
        caller.send_signal(signal.SIGKILL)
        caller.wait(30)
    finally:
        if caller.poll() is None:
            caller.kill()
    assert _wait(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers), 30), \
        'workers outlived their killed caller'
    before = _finished(folder)
    assert 2 <= len(before) < 8
    resumed = make_research(folder)
    resumed.run(n_iters=N_ITERS, workers=2, devices=['CPU:0', 'CPU:1'], seed=SEED, bar=False)
    assert resumed.monitor.finished == 8 - len(before) and not resumed.monitor.exceptions
    whole = make_research(str(tmp_path / 'whole'))
    whole.run(n_iters=N_ITERS, workers=2, devices=['CPU:0', 'CPU:1'], seed=SEED, bar=False)
    assert table(Research.load(folder, trusted=True)) == table(whole)
