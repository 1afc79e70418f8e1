"""flowpipe.research.pool: a concurrent.futures.Executor of spawned workers that survives a killed worker."""
import os
import signal
import time

import pytest

from flowpipe.research import ProcessPool, WorkerDied

pytestmark = pytest.mark.slow


def square(x):
    return x * x


def fail(message):
    raise KeyError(message)


def pid():
    return os.getpid()


def sleep_and_pid(seconds):
    time.sleep(seconds)
    return os.getpid()


def test_results_errors_and_functions_of_main():
    pool = ProcessPool(2)
    try:
        local = lambda x: x + 1            # noqa: E731 (travels by value, with dill)
        assert [pool.submit(square, i).result() for i in range(3)] == [0, 1, 4]
        assert pool.submit(local, 1).result() == 2
        with pytest.raises(KeyError, match='boom') as info:
            pool.submit(fail, 'boom').result()
        assert any('Traceback in the worker process' in note for note in getattr(info.value, '__notes__', []))
    finally:
        pool.shutdown()
    assert pool.pids == []


def test_killed_worker_fails_only_its_job_and_is_replaced():
    pool = ProcessPool(1)
    try:
        first = pool.submit(pid).result()
        doomed = pool.submit(sleep_and_pid, 60)
        after = pool.submit(square, 3)
        time.sleep(0.5)
        os.kill(first, signal.SIGKILL)
        with pytest.raises(WorkerDied, match='exited with code'):
            doomed.result(timeout=900)
        assert after.result(timeout=900) == 9
        assert pool.pids and pool.pids[0] != first
    finally:
        pool.shutdown()


def test_shutdown_without_wait_stops_running_jobs():
    pool = ProcessPool(1)
    running = pool.submit(sleep_and_pid, 60)
    queued = pool.submit(square, 2)
    time.sleep(1.0)
    pool.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    with pytest.raises(WorkerDied):
        running.result(timeout=900)


def test_bad_size():
    with pytest.raises(ValueError, match='max_workers'):
        ProcessPool(0)
