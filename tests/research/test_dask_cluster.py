"""A research on a real Dask cluster: ``dask scheduler`` and ``dask worker`` started as separate commands on
127.0.0.1 (``tests/research/dask_caller.py`` runs the research from its own process, as a user's script would).

A worker killed mid-run: its experiment runs again on the other worker, and the table is complete and the one a
run in one process gives. The caller killed mid-run and started again: only the experiments it had not recorded
run again (counted by the file each execution leaves). A worker that joins mid-run takes experiments.

Experiments are held in flight by files (``dask_jobs.step``), so nothing here depends on the machine's speed; each
wait has a generous overall limit."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from . import dask_jobs

pytestmark = pytest.mark.slow
distributed = pytest.importorskip('distributed')

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALLER = os.path.join(ROOT, 'tests', 'research', 'dask_caller.py')
LIMIT = 900         # seconds for any one wait: only a hang reaches it
_ENV = {**os.environ, 'PYTHONPATH': ROOT}
_LOCAL = ('--host', '127.0.0.1', '--no-dashboard', '--dashboard-address', '127.0.0.1:0')


def _until(condition, what, process=None):
    """Wait for ``condition()``; fail naming ``what`` past ``LIMIT`` or when ``process`` ends first."""
    deadline = time.monotonic() + LIMIT
    while not condition():
        if process is not None and process.poll() is not None:
            pytest.fail(f'the process ended (code {process.returncode}) before {what}')
        if time.monotonic() > deadline:
            pytest.fail(f'no {what} within {LIMIT} s')
        time.sleep(0.1)


def _address(path):
    """The scheduler's address in its file; ``None`` before the file is written whole."""
    try:
        return json.loads(path.read_text())['address']
    except (OSError, ValueError, KeyError):
        return None


class Cluster:
    """A scheduler and workers, each ``python -m dask ...`` in its own session (killed as a whole: a machine lost),
    with their output in ``folder``; ``client`` watches them."""

    def __init__(self, folder):
        self.folder, self.processes = folder, {}
        path = folder / 'scheduler.json'
        scheduler = self._start('scheduler', 'scheduler', '--port', '0', '--scheduler-file', str(path))
        _until(lambda: _address(path) is not None, 'scheduler file', scheduler)
        self.address = _address(path)
        self.client = distributed.Client(self.address, timeout=LIMIT, set_as_default=False)

    def _start(self, name, *command):
        log = open(self.folder / f'{name}.log', 'w')
        process = subprocess.Popen([sys.executable, '-m', 'dask', *command, *_LOCAL], env=_ENV, cwd=ROOT,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.processes[name] = process
        return process

    def workers(self):
        return sorted(info['name'] for info in self.client.scheduler_info()['workers'].values())

    def add_worker(self, name):
        process = self._start(name, 'worker', self.address, '--nworkers', '1', '--nthreads', '1', '--name', name)
        _until(lambda: name in self.workers(), f'worker {name} in the cluster', process)

    def kill(self, name):
        """SIGKILL the worker's command and its processes; wait until the scheduler has let it go."""
        os.killpg(self.processes[name].pid, signal.SIGKILL)
        self.processes.pop(name).wait()
        _until(lambda: name not in self.workers(), f'worker {name} removed from the cluster')

    def close(self):
        self.client.close()
        for process in self.processes.values():
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()


@pytest.fixture
def cluster(tmp_path):
    (tmp_path / 'cluster').mkdir()
    made = Cluster(tmp_path / 'cluster')
    yield made
    made.close()


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    """The research's table run in this process."""
    root = tmp_path_factory.mktemp('reference')
    research = dask_jobs.research(str(root / 'research'), str(root)).run(n_iters=1, parallel=False, bar=False,
                                                                        seed=5)
    return dask_jobs.table(research)


def _held(tmp_path):
    """The executions' folder with every experiment held."""
    folder = tmp_path / 'runs'
    folder.mkdir()
    for lr in dask_jobs.LRS:
        (folder / f'hold-{lr}').touch()
    return folder


def _release(folder, *lrs):
    for lr in lrs or dask_jobs.LRS:
        (folder / f'hold-{lr}').unlink(missing_ok=True)


def _caller(cluster, tmp_path, folder):
    log = open(tmp_path / 'caller.log', 'a')
    process = subprocess.Popen([sys.executable, CALLER, cluster.address, str(tmp_path / 'research'), str(folder)],
                               env=_ENV, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return process


def _finished(process, tmp_path):
    """The table the caller printed, once it ended with 0."""
    try:
        process.wait(timeout=LIMIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    out = (tmp_path / 'caller.log').read_text()
    assert process.returncode == 0, out[-4000:]
    return [line for line in out.splitlines() if line.startswith('done ')][-1]


def _log(tmp_path):
    return (tmp_path / 'research' / 'research.log').read_text()


def _two_running(cluster, tmp_path):
    """Workers w1 and w2, the caller, and the experiments held: ``(folder, caller)`` once 2 of them run."""
    cluster.add_worker('w1')
    cluster.add_worker('w2')
    folder = _held(tmp_path)
    caller = _caller(cluster, tmp_path, folder)
    _until(lambda: len(dask_jobs.executions(folder)) == 2, '2 experiments running', caller)
    return folder, caller


def test_a_killed_worker_s_experiment_runs_again_on_the_other_worker(cluster, tmp_path, reference):
    folder, caller = _two_running(cluster, tmp_path)
    lost, victim = dask_jobs.executions(folder)[0]
    survivor = 'w2' if victim == 'w1' else 'w1'
    cluster.kill(victim)
    _release(folder)
    assert _finished(caller, tmp_path) == f'done {reference}'
    assert dask_jobs.executions(folder) == sorted([(lost, victim)] + [(lr, survivor) for lr in dask_jobs.LRS])
    assert 'failed' not in _log(tmp_path)


def test_a_restarted_caller_runs_only_the_experiments_it_had_not_recorded(cluster, tmp_path, reference):
    folder, caller = _two_running(cluster, tmp_path)
    first = dask_jobs.executions(folder)[0][0]
    _release(folder, first)            # it ends and is recorded before a third experiment is handed out
    _until(lambda: len(dask_jobs.executions(folder)) == 3, 'a third experiment running', caller)
    caller.kill()
    caller.wait()
    before = [lr for lr, _ in dask_jobs.executions(folder)]
    _release(folder)                   # the killed caller's tasks end on their workers, their results unread
    again = _finished(_caller(cluster, tmp_path, folder), tmp_path)
    assert again == f'done {reference}'
    after = [lr for lr, _ in dask_jobs.executions(folder)]
    for lr in before:
        after.remove(lr)
    assert sorted(after) == [lr for lr in dask_jobs.LRS if lr != first]      # each unfinished one once, no more
    assert 'Research is starting: 1 experiments already finished' in _log(tmp_path)


def test_a_worker_joining_mid_run_takes_experiments(cluster, tmp_path, reference):
    cluster.add_worker('w1')
    folder = _held(tmp_path)
    caller = _caller(cluster, tmp_path, folder)
    _until(lambda: len(dask_jobs.executions(folder)) == 1, 'an experiment running', caller)
    cluster.add_worker('w2')
    _until(lambda: any(worker == 'w2' for _, worker in dask_jobs.executions(folder)), 'an experiment on w2', caller)
    _release(folder)
    assert _finished(caller, tmp_path) == f'done {reference}'
    runs = dask_jobs.executions(folder)
    assert [lr for lr, _ in runs] == dask_jobs.LRS and {worker for _, worker in runs} == {'w1', 'w2'}
