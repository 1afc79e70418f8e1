"""flowpipe.processes: one stop sequence (ask, grace, SIGTERM, grace, SIGKILL), children that end with their caller,
no semaphore left behind, and workers that leave the stop signals to their caller's run."""
import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flowpipe.processes import Forked, Spawned, Spec, stop

from . import process_jobs
from .killed_caller import worker_ends_with_killed_caller

ROOT = Path(__file__).resolve().parents[1]
READY_SECONDS = 600           # a spawned child imports flowpipe: only a broken start takes that long
GRACE = 0.5                   # for children that never end by themselves


def _start(launcher, target):
    context = launcher.context()
    tasks, ready = context.Queue(), context.Event()
    child = launcher.start(Spec(target, (tasks, ready), 'flowpipe-test-child', ask=lambda: tasks.put(None),
                                channels=(tasks,)))
    assert ready.wait(READY_SECONDS), 'the child did not start'
    return child, tasks


def _semaphores(channel):
    return {f"sem.{lock._semlock.name.lstrip('/')}" for lock in (channel._rlock, channel._wlock, channel._sem)}


@pytest.mark.parametrize('launcher, target, grace, code', [
    (Spawned(), process_jobs.obey, READY_SECONDS, 0),               # asked: it ends by itself
    (Spawned(), process_jobs.hang, GRACE, -signal.SIGKILL),         # deaf to the asking, ignores SIGTERM: killed
    (Forked(), process_jobs.hang, GRACE, -signal.SIGTERM),          # a rank deaf to the asking: SIGTERM ends it
], ids=['obeys', 'ignores-everything', 'ignores-the-asking'])
def test_the_stop_sequence_asks_then_terminates_then_kills(launcher, target, grace, code):
    child, tasks = _start(launcher, target)
    semaphores = _semaphores(tasks)
    del tasks
    assert child.alive and child.exitcode is None
    child.stop(grace)
    assert not child.alive and child.exitcode == code
    gc.collect()                         # the stopped child, still held, holds no queue: its semaphores are gone
    assert not semaphores & set(os.listdir('/dev/shm'))


def test_stop_now_skips_the_asking_and_stops_several_children_together():
    children = [_start(Spawned(), process_jobs.obey)[0], _start(Forked(), process_jobs.obey)[0]]
    stop(children, GRACE, now=True)
    assert [child.exitcode for child in children] == [-signal.SIGKILL, -signal.SIGTERM]
    stop(children, GRACE)                # idempotent: nothing left to ask, nothing to release
    assert [child.exitcode for child in children] == [-signal.SIGKILL, -signal.SIGTERM]


@pytest.mark.slow     # a fresh interpreter and its child: in CI or with FLOWPIPE_SLOW=1
@pytest.mark.parametrize('kind', ['Spawned()', "Forked(('flowpipe.processes',))"])
def test_a_child_ends_with_its_killed_caller(tmp_path, kind):
    assert worker_ends_with_killed_caller(tmp_path, textwrap.dedent(f'''
        from flowpipe.processes import Forked, Spawned, Spec
        from tests.process_jobs import hang_writing

        if __name__ == '__main__':
            {kind}.start(Spec(hang_writing, ({str(tmp_path / 'pids')!r},))).join()
    '''))


@pytest.mark.slow     # a fresh interpreter and its workers: in CI or with FLOWPIPE_SLOW=1
@pytest.mark.parametrize('name', ['SIGTERM', 'SIGUSR1'])
def test_a_signal_to_the_whole_process_group_stops_a_run_in_worker_processes_gracefully(tmp_path, name):
    """Slurm signals every process of a job step, a terminal's Ctrl-C every process of its group: the workers of a
    ``target='processes'`` run leave the signal to the caller, which finishes its batch, writes its checkpoint and
    exits with 128 + the signal's number; the run resumed from it yields the batches the run never stopped yields."""
    number = getattr(signal, name)
    checkpoints, marks, reference = tmp_path / 'checkpoints', tmp_path / 'marks', tmp_path / 'reference'
    for folder in (marks, reference / 'marks'):
        folder.mkdir(parents=True)
    env = {**os.environ, 'PYTHONPATH': f'{ROOT}{os.pathsep}{os.environ.get("PYTHONPATH", "")}'}
    script = [sys.executable, process_jobs.__file__]
    whole = subprocess.run([*script, str(reference / 'checkpoints'), str(reference / 'marks')], env=env,
                           check=True, capture_output=True, text=True).stdout.splitlines()
    child = subprocess.Popen([*script, str(checkpoints), str(marks)], env=env, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + READY_SECONDS
        while not (marks / 'began-3').exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(child.pid, number)
        out, _ = child.communicate(timeout=READY_SECONDS)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 128 + number
    first = out.splitlines()
    files = os.listdir(checkpoints)
    assert len(files) == 1 and 0 < len(first) < len(whole)
    assert files == [f'checkpoint-{len(first):09d}.flowpipe']          # the last batch yielded
    rest = subprocess.run([*script, str(checkpoints), str(marks)], env=env, check=True, capture_output=True,
                          text=True).stdout.splitlines()
    assert first + rest == whole


class _Recorder:
    """A child that records the signals sent to it."""
    def __init__(self):
        self.sent = []

    def signal(self, number):
        self.sent.append(number)


def test_forwarding_passes_the_callers_signals_on_and_puts_the_handlers_back():
    from flowpipe.processes import Forwarding
    called, children = [], [_Recorder()]
    previous = signal.signal(signal.SIGUSR1, lambda number, frame: called.append(number))
    ignored = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        before = [signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)]
        with Forwarding(children) as forwarding:
            children.append(_Recorder())                   # a child started in the block gets the later signals
            os.kill(os.getpid(), signal.SIGUSR1)
            os.kill(os.getpid(), signal.SIGTERM)           # ignored by the caller: not passed on
            os.kill(os.getpid(), signal.SIGINT)
            with pytest.raises(KeyboardInterrupt):         # a second Ctrl-C is passed on and raises at once
                os.kill(os.getpid(), signal.SIGINT)
        assert [child.sent for child in children] == [[signal.SIGUSR1, signal.SIGINT, signal.SIGINT]] * 2
        assert forwarding.received == [signal.SIGUSR1, signal.SIGINT, signal.SIGINT] and called == []
        assert [signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)] == before
        forwarding.call_previous()                         # the Python handlers, once each; not Python's SIGINT one
        assert called == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)
        signal.signal(signal.SIGTERM, ignored)


def test_a_rank_starts_a_process_group_of_its_own_and_a_worker_stays_in_its_callers():
    groups, pids = [], []
    for launcher in (Forked(), Spawned()):
        child, tasks = _start(launcher, process_jobs.obey)
        groups.append(os.getpgid(child.pid))
        pids.append(child.pid)
        child.stop(READY_SECONDS)
    assert groups == [pids[0], os.getpgid(0)]
