"""One daemon thread per replica, owned by a replica engine.

Each replica always runs on the same thread, so a thread can keep its CUDA stream. The threads are daemons
and are also stopped by ``close()`` or, if the engine is dropped without closing, by ``weakref.finalize``.
"""
from __future__ import annotations

import queue
import threading
import weakref
from concurrent.futures import Future
from typing import Any, Callable

__all__ = ['ReplicaWorkers']

_STOP = object()


def _serve(tasks: queue.SimpleQueue) -> None:
    # each job runs in its own frame: nothing of the last job (its closure holds the engine) outlives it, so
    # an engine dropped without close() can still be collected and its finalizer can stop this thread
    while _run_job(tasks.get()):
        pass


def _run_job(item: Any) -> bool:
    """Run one queued job; ``False`` on the stop signal."""
    if item is _STOP:
        return False
    future, fn = item
    if future.set_running_or_notify_cancel():
        try:
            future.set_result(fn())
        except BaseException as error:  # noqa: BLE001 - shipped to the caller, which re-raises it
            future.set_exception(error)
    return True


def _stop(queues: list[queue.SimpleQueue], threads: list[threading.Thread]) -> None:
    for tasks in queues:
        tasks.put(_STOP)
    for thread in threads:
        if thread is not threading.current_thread():
            thread.join(timeout=10)


class ReplicaWorkers:
    """``count`` daemon threads; ``submit(i, fn)`` runs ``fn`` on thread ``i`` and returns a ``Future``."""

    def __init__(self, count: int, name: str = 'flowpipe-replica'):
        self._queues = [queue.SimpleQueue() for _ in range(count)]
        self._threads = [threading.Thread(target=_serve, args=(q,), name=f'{name}-{i}', daemon=True)
                         for i, q in enumerate(self._queues)]
        for thread in self._threads:
            thread.start()
        self._finalizer = weakref.finalize(self, _stop, self._queues, self._threads)

    @property
    def threads(self) -> tuple[threading.Thread, ...]:
        """The worker threads, one per non-primary replica."""
        return tuple(self._threads)

    @property
    def closed(self) -> bool:
        """Whether the threads were stopped."""
        return not self._finalizer.alive

    def submit(self, index: int, fn: Callable[[], Any]) -> Future:
        """Queue ``fn`` on worker ``index``."""
        if not self._finalizer.alive:
            raise RuntimeError('Expected an open engine. Received: a call after close(); build a new engine.')
        future: Future = Future()
        self._queues[index].put((future, fn))
        return future

    def close(self) -> None:
        """Stop and join the threads (idempotent)."""
        self._finalizer()
