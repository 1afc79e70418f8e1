"""``ProcessPool``: a ``concurrent.futures.Executor`` whose workers are spawned processes that survive a crash.

Why not ``concurrent.futures.ProcessPoolExecutor``: a worker killed there breaks the whole pool (every pending
future fails) and its workers re-import ``__main__``. Here each worker runs one job at a time, so a worker that
dies (killed, out of memory, a crash in C code) fails only its own job's future, with ``WorkerDied``; a new worker
takes its place. ``end(future, error)`` ends a running job the same way (the research's ``timeout=``), and
``started(future)`` says when a job began in its worker. Jobs and results travel as dill bytes (functions of
``__main__`` or of a notebook included); each worker replies through a pipe of its own, so that a worker ended in
the middle of a reply leaves no lock or half message to the others.

Workers are ``flowpipe.processes.Spawned`` processes: no ``if __name__ == '__main__'`` needed; they ignore Ctrl-C,
SIGTERM and SIGUSR1 (the caller decides) and end when the caller dies, even in the middle of a job.
``shutdown(wait=False)`` kills the workers at once (jobs running are lost); ``shutdown(wait=True)`` lets the
running jobs finish. Every stop goes through ``flowpipe.processes.stop``.
"""
from __future__ import annotations

import contextlib
import functools
import threading
import time
import weakref
from collections import deque
from concurrent.futures import Executor, Future
from multiprocessing.connection import wait as wait_connections
from typing import Any, Callable

import dill

from ..execution.workers import dump_error
from ..processes import Spawned, Spec, stop

__all__ = ['ProcessPool', 'WorkerDied']

_POLL_SECONDS = 0.1
_STOP_SECONDS = 5.0
_STARTED = 'started'          # a worker's first reply to a job: it has begun


class WorkerDied(RuntimeError):
    """The worker process running a job exited before it replied."""


class ProcessPool(Executor):
    """``max_workers`` spawned worker processes, one job each at a time.

    Args:
        max_workers: the number of worker processes (>= 1).
    """

    def __init__(self, max_workers: int = 1):
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"Expected max_workers to be an int >= 1. Received: max_workers={max_workers!r}.")
        self._launcher = Spawned()
        self.max_workers = max_workers
        # {'process', 'tasks', 'replies', 'job': (job_id, future) or None, 'started': monotonic time or None}
        self._workers: list[dict] = []
        self._pending: deque = deque()
        self._lock = threading.Lock()
        self._jobs = 0
        self._shutdown = False
        self._collector: threading.Thread | None = None
        self._began: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()     # future -> when its job began

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` in a worker process; its ``Future`` holds the result or the error."""
        with self._lock:
            if self._shutdown:
                raise RuntimeError("Expected a running ProcessPool. Received: one shut down. Make a new pool.")
            future: Future = Future()
            self._jobs += 1
            self._pending.append((self._jobs, future, dill.dumps((fn, args, kwargs), recurse=True)))
            self._dispatch()
            if self._collector is None:
                self._collector = threading.Thread(target=self._collect, name='flowpipe-research-pool', daemon=True)
                self._collector.start()
        return future

    def started(self, future: Future) -> float | None:
        """When (``time.monotonic()``) the job of ``future`` began in its worker; ``None`` before it begins."""
        with self._lock:
            return self._began.get(future)

    def end(self, future: Future, error: BaseException) -> bool:
        """End the running job of ``future``: its worker is terminated (a new one takes the next job) and the
        future fails with ``error``. ``False`` when the job does not run now (not begun, or over)."""
        with self._lock:
            worker = self._running(future)
            if worker is None:
                return False
            self._workers.remove(worker)
            worker['job'] = None
        worker['process'].stop(_STOP_SECONDS, now=True)
        future.set_exception(error)
        with self._lock:
            if not self._shutdown:
                self._dispatch()
        return True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the pool: jobs not started are cancelled (``cancel_futures``) or still run (``wait``); with
        ``wait=False`` the workers are terminated at once and their running jobs fail."""
        with self._lock:
            self._shutdown = True
            if cancel_futures or not wait:
                while self._pending:
                    self._pending.popleft()[1].cancel()
        if wait and self._collector is not None:
            self._collector.join()
        with self._lock:
            stop([worker['process'] for worker in self._workers], _STOP_SECONDS, now=not wait)
            for worker in self._workers:
                if worker['job'] is not None:
                    worker['job'][1].set_exception(WorkerDied("The pool was shut down while the job ran."))
                    worker['job'] = None
            self._workers = []
        if self._collector is not None and self._collector is not threading.current_thread():
            self._collector.join()

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids."""
        return [worker['process'].pid for worker in self._workers]

    def _running(self, future: Future) -> dict | None:
        """The worker whose job has begun and belongs to ``future`` (the lock is held)."""
        return next((worker for worker in self._workers if worker['job'] is not None
                     and worker['job'][1] is future and worker['started'] is not None), None)

    # ----- in the caller's collector thread -----
    def _dispatch(self) -> None:
        """Give pending jobs to idle workers, starting workers up to ``max_workers`` (the lock is held)."""
        while self._pending:
            idle = next((worker for worker in self._workers if worker['job'] is None), None)
            if idle is None and len(self._workers) < self.max_workers:
                idle = self._start_worker()
            if idle is None:
                return
            job_id, future, payload = self._pending.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            idle['job'], idle['started'] = (job_id, future), None
            idle['tasks'].put((job_id, payload))

    def _start_worker(self) -> dict:
        context = self._launcher.context()
        tasks = context.Queue()
        replies, reply_end = context.Pipe(duplex=False)
        process = self._launcher.start(Spec(_worker_loop, (tasks, reply_end), f'flowpipe-research-worker-'
                                            f'{len(self._workers)}', ask=functools.partial(tasks.put, None),
                                            channels=(tasks, replies)))
        reply_end.close()              # the worker holds the only writer: its exit is an end of file here
        worker = {'process': process, 'tasks': tasks, 'replies': replies, 'job': None, 'started': None}
        self._workers.append(worker)
        return worker

    def _collect(self) -> None:
        while True:
            with self._lock:
                busy = any(worker['job'] is not None for worker in self._workers) or bool(self._pending)
                if self._shutdown and not busy:
                    return
                readers = {worker['replies']: worker for worker in self._workers}
            try:
                ready = wait_connections(list(readers), timeout=_POLL_SECONDS) if readers else []
            except (OSError, ValueError):   # a worker ended meanwhile closed its pipe
                ready = []
            for reader in ready:
                try:
                    job_id, ok, payload = reader.recv()
                except Exception:           # its worker died (in the middle of a reply): seen below
                    continue
                self._received(readers[reader], job_id, ok, payload)
            if not readers:
                time.sleep(_POLL_SECONDS)
            self._check_workers()

    def _received(self, worker: dict, job_id: int, ok: Any, payload: Any) -> None:
        with self._lock:
            if worker['job'] is None or worker['job'][0] != job_id:
                return                      # a job ended meanwhile (end, shutdown)
            if ok == _STARTED:
                worker['started'] = self._began[worker['job'][1]] = time.monotonic()
                return
            future = worker['job'][1]
            worker['job'] = worker['started'] = None
            self._dispatch()
        _resolve(future, ok, payload)

    def _check_workers(self) -> None:
        with self._lock:
            for worker in list(self._workers):
                if worker['process'].alive:
                    continue
                self._workers.remove(worker)
                worker['process'].stop(_STOP_SECONDS, now=True)
                if worker['job'] is not None:
                    code = worker['process'].exitcode
                    worker['job'][1].set_exception(WorkerDied(
                        f"Expected the worker process to finish its job. Received: it exited with code {code} "
                        f"(killed, out of memory or a crash in C code)."))
            if not self._shutdown:
                self._dispatch()


def _resolve(future: Future, ok: bool, payload: bytes) -> None:
    try:
        value = dill.loads(payload)
    except Exception as error:
        future.set_exception(error)
        return
    if ok:
        future.set_result(value)
    else:
        error, text = value
        with contextlib.suppress(Exception):
            error.add_note(f"Traceback in the worker process:\n{text}")
        future.set_exception(error)


# ----- in the worker process -----
def _worker_loop(tasks: Any, replies: Any) -> None:
    """Run jobs ``(job_id, payload)`` until ``None``; reply ``(job_id, 'started', None)`` once a job's function
    is loaded, then ``(job_id, ok, payload)``."""
    import torch  # noqa: F401  (every research task imports it: not on the clock of the first job's time limit)
    while True:
        try:
            message = tasks.get()
        except (EOFError, OSError):
            return
        if message is None:
            return
        job_id, payload = message
        try:
            fn, args, kwargs = dill.loads(payload)
            replies.send((job_id, _STARTED, None))
            ok, reply = True, dill.dumps(fn(*args, **kwargs), recurse=True)
        except BaseException as error:
            ok, reply = False, dump_error(error)
        replies.send((job_id, ok, reply))
