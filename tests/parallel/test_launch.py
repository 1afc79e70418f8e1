"""The launcher: results in rank order, a failing or killed rank fails the job within the timeout, no orphans."""
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from flowpipe.errors import LaunchError, RunStopped
from flowpipe.lifeline import alive
from flowpipe.parallel import launch

from . import dist_jobs

TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


def _ranks():
    from flowpipe.parallel import distributed
    world = distributed.setup()
    total = distributed.reduce(world.rank + 1)
    return world.rank, world.size, world.backend, total


@pytest.mark.slow
def test_a_function_runs_in_every_rank_and_returns_in_rank_order():
    assert launch(_ranks, 2, timeout=TIMEOUT) == [(0, 2, 'gloo', 3), (1, 2, 'gloo', 3)]
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_a_raising_rank_fails_the_job_with_its_rank_type_and_message_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(LaunchError, match=r'rank 1 failed: ValueError: bad value on purpose in rank 1') as info:
        launch(dist_jobs.fail_on, 2, args=(1,), timeout=TIMEOUT)
    assert time.monotonic() - start < TIMEOUT
    assert info.value.rank == 1 and info.value.kind == 'ValueError'
    assert 'fail_on' in info.value.remote_traceback
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_a_killed_rank_fails_the_job_within_the_timeout():
    start = time.monotonic()
    with pytest.raises(LaunchError, match='rank 0 was killed by signal SIGKILL'):
        launch(dist_jobs.kill_self, 2, args=(0,), timeout=TIMEOUT)
    assert time.monotonic() - start < TIMEOUT
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_a_job_past_its_timeout_is_ended(tmp_path):
    script = tmp_path / 'sleeper.py'
    script.write_text('import time\ntime.sleep(600)\n')
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r'ranks \[0\] still running'):
        launch(script, 1, timeout=3)
    assert time.monotonic() - start < 300      # ended, not slept out
    assert not multiprocessing.active_children()


@pytest.mark.slow
def test_a_script_exiting_with_code_0_succeeds_and_with_another_code_fails(tmp_path):
    script = tmp_path / 'exits.py'
    script.write_text('import sys\nsys.exit(None if sys.argv[1] == "none" else int(sys.argv[1]))\n')
    assert launch(script, 2, args=('none',), timeout=TIMEOUT) == [None, None]
    assert launch(script, 2, args=(0,), timeout=TIMEOUT) == [None, None]
    with pytest.raises(LaunchError, match='SystemExit: 3'):
        launch(script, 2, args=(3,), timeout=TIMEOUT)


@pytest.mark.parametrize('arguments, error', [((42,), TypeError), (('no/such/script.py',), ValueError),
                                              ((_ranks, 0), ValueError), ((_ranks, 2.0), ValueError)])
def test_bad_arguments_are_refused_before_any_process_starts(arguments, error):
    with pytest.raises(error, match='Expected'):
        launch(*arguments)


def _threads():
    import torch
    return torch.get_num_threads()


@pytest.mark.slow
def test_each_rank_runs_one_torch_thread_unless_omp_num_threads_says_otherwise():
    assert launch(_threads, 2, timeout=TIMEOUT) == [1, 1]
    assert launch(_threads, 1, timeout=TIMEOUT, env={'OMP_NUM_THREADS': '2'}) == [2]


def _default_dtype():
    import torch
    return str(torch.get_default_dtype())


@pytest.mark.slow
def test_ranks_start_with_the_callers_default_dtype():
    import torch
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert launch(_default_dtype, 2, timeout=TIMEOUT) == ['torch.float64'] * 2
        torch.set_default_dtype(torch.float32)
        assert launch(_default_dtype, 1, timeout=TIMEOUT) == ['torch.float32']
    finally:
        torch.set_default_dtype(previous)


CALLER = '''
import os, sys, time
from flowpipe.parallel import launch

def sleeper(folder):
    open(os.path.join(folder, str(os.getpid())), 'w').close()
    time.sleep(300)

if __name__ == '__main__':
    launch(sleeper, 2, args=(sys.argv[1],), timeout=600)
'''


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f'/proc/{pid}/stat') as stat:
        return stat.read().rsplit(')', 1)[1].split()[0] != 'Z'


@pytest.mark.slow
def test_ranks_end_when_their_caller_is_killed(tmp_path):
    script, folder = tmp_path / 'caller.py', tmp_path / 'pids'
    script.write_text(CALLER)
    folder.mkdir()
    caller = subprocess.Popen([sys.executable, str(script), str(folder)])
    try:
        deadline = time.monotonic() + 600
        while len(os.listdir(folder)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        ranks = [int(name) for name in os.listdir(folder)]
        assert len(ranks) == 2
    finally:
        caller.kill()
        caller.wait()
    deadline = time.monotonic() + 300
    while any(_alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in ranks)


def _handlers():
    return [signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)]


def _wait_for_signal(ready, handled):
    """In a rank: note SIGUSR1, report in ``ready``, wait until it comes (or until the caller's own handler ran:
    then the caller did not pass it on); the signals noted."""
    noted = []
    signal.signal(signal.SIGUSR1, lambda number, frame: noted.append(signal.Signals(number).name))
    open(ready, 'w').close()
    while not noted and not os.path.exists(handled):
        time.sleep(0.01)
    return noted


@pytest.mark.slow
def test_a_signal_to_the_caller_reaches_the_ranks_then_the_callers_own_handler(tmp_path):
    ready, handled, done = tmp_path / 'ready', tmp_path / 'handled', threading.Event()
    called = []

    def handler(number, frame):
        called.append(number)
        handled.touch()

    def send():
        while not ready.exists() and not done.is_set():
            time.sleep(0.01)
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
    previous = signal.signal(signal.SIGUSR1, handler)
    sender = threading.Thread(target=send)
    try:
        before = _handlers()
        sender.start()
        assert launch(_wait_for_signal, 1, args=(str(ready), str(handled)), timeout=TIMEOUT) == [['SIGUSR1']]
        assert called == [signal.SIGUSR1]          # once, after the ranks ended
        assert _handlers() == before
    finally:
        done.set()
        sender.join()
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.slow
def test_launch_from_another_thread_runs_without_passing_signals_on():
    before, returned = _handlers(), []
    thread = threading.Thread(target=lambda: returned.append(launch(_threads, 1, timeout=TIMEOUT)))
    thread.start()
    thread.join()
    assert returned == [[1]] and _handlers() == before


def _stop_in_turn(folder):
    """Rank 1 raises ``RunStopped`` at once, rank 0 only once rank 1 has exited (a checkpoint slow to write),
    with its Slurm job requeued."""
    if os.environ['RANK'] == '1':
        with open(os.path.join(folder, 'pid.part'), 'w', encoding='ascii') as file:
            file.write(str(os.getpid()))
        os.replace(os.path.join(folder, 'pid.part'), os.path.join(folder, 'pid'))
        raise RunStopped('SIGUSR1')
    while not os.path.exists(os.path.join(folder, 'pid')):
        time.sleep(0.01)
    with open(os.path.join(folder, 'pid'), encoding='ascii') as file:
        pid = int(file.read())
    while alive(pid):
        time.sleep(0.01)
    raise RunStopped('SIGUSR1', requeued=True)


@pytest.mark.slow
def test_ranks_that_stop_gracefully_are_all_waited_for_and_the_caller_raises_run_stopped(tmp_path):
    with pytest.raises(RunStopped) as info:
        launch(_stop_in_turn, 2, args=(str(tmp_path),), timeout=TIMEOUT)
    assert (info.value.signal, info.value.code, info.value.requeued) == ('SIGUSR1', 138, True)   # rank 0's report too
    assert isinstance(info.value.__cause__, LaunchError) and info.value.__cause__.rank == 1
    assert 'the run stopped on SIGUSR1 after writing its checkpoint' in str(info.value.__cause__)
    assert not multiprocessing.active_children()


def test_launch_error_is_exported_from_flowpipe_as_the_docs_name_it():
    from flowpipe import LaunchError as exported
    assert exported is LaunchError
