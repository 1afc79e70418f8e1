"""One small pool of threads per process that decodes the files of a batch in parallel.

Pillow releases the GIL while it decodes, so the files of one batch decode on every core while the pipeline's
prefetch threads (each loading its own batch) share the same pool: however many batches load at once, at most
one decoding thread per core runs. The threads are daemons that exit after ``IDLE_SECONDS`` without work, so
the pool costs nothing between runs and a forked child (which has none of its parent's threads) starts its own.
"""
from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from typing import Any, Callable, Sequence

__all__ = ['DecodePool', 'IDLE_SECONDS', 'decode_pool', 'pool_size']

IDLE_SECONDS = 0.5
# Marks the pool's own threads: a map called from a task runs inline rather than wait on tasks queued behind its
# own, which could leave every thread waiting.
_INSIDE = threading.local()


def pool_size() -> int:
    """The cores this process may run on (its CPU affinity where the platform tells it)."""
    if hasattr(os, 'sched_getaffinity'):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


class DecodePool:
    """Up to ``size`` daemon threads taking ``(future, function, item)`` tasks from one queue.

    ``map`` waits for every task it gave before it returns or raises, so no task of a failed call is still
    running (or holding a file) afterwards.
    """

    def __init__(self, size: int):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"Expected a positive int of threads. Received: size={size!r}.")
        self.size = size
        self.pid = os.getpid()
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._started = 0

    def map(self, function: Callable[[Any], Any], items: Sequence[Any]) -> list:
        """``[function(item) for item in items]`` in the pool's threads; raises the first error in item order."""
        if self.size == 1 or len(items) < 2 or getattr(_INSIDE, 'pool', False):
            return [function(item) for item in items]
        futures = [Future() for _ in items]
        for future, item in zip(futures, items):
            self._tasks.put((future, function, item))
        with self._lock:
            # A thread leaves only under this lock and only when the queue is empty: the tasks just put are
            # either seen by a thread still counted here or make this call start new threads.
            while self._threads < min(self.size, len(items)):
                self._threads += 1
                self._started += 1
                threading.Thread(target=self._work, name=f'flowpipe-decode-{self._started}', daemon=True).start()
        errors = [future.exception() for future in futures]
        for error in errors:
            if error is not None:
                raise error
        return [future.result() for future in futures]

    def _work(self) -> None:
        _INSIDE.pool = True
        while True:
            try:
                future, function, item = self._tasks.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._tasks.empty():
                        self._threads -= 1
                        return
                continue
            try:
                future.set_result(function(item))
            except BaseException as error:  # noqa: BLE001 -- handed to the caller, which re-raises it
                future.set_exception(error)


_POOL: DecodePool | None = None
_POOL_LOCK = threading.Lock()


def decode_pool() -> DecodePool:
    """This process's pool, of ``pool_size()`` threads (a new one in a forked child)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid():
            _POOL = DecodePool(pool_size())
        return _POOL
