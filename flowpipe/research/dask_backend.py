"""``Research.run(..., executor=...)`` on Dask: experiments handed to a ``distributed`` cluster.

Three forms reach a cluster (``dask[distributed]``, the ``dask`` extra, is imported only then):

- ``'dask'``: a ``LocalCluster`` on 127.0.0.1 with one single-threaded worker process per research worker, started
  for the run and closed after it (no process is left behind);
- an address such as ``'tcp://10.0.0.5:8786'``: a client of that running cluster (its workers may be on other
  machines), closed after the run; the cluster stays;
- a ``distributed.Client``: used as it is, neither closed nor its cluster.

``DaskExecutor`` is a ``concurrent.futures.Executor``: the research submits experiments to it as it does to the
local process pool. A task whose worker process dies is run again by Dask on another worker (the scheduler's
``allowed-failures`` times, then its future raises ``KilledWorker``); a cancelled future cancels its task.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Executor, Future
from concurrent.futures import wait as wait_futures
from typing import Any

from ..execution.workers import hidden_main

__all__ = ['DaskExecutor', 'is_dask', 'open_dask']

_ADDRESS_SCHEMES = ('tcp://', 'tls://', 'ucx://', 'inproc://', 'ws://', 'wss://')
_INSTALL = "pip install 'flowpipe[dask]'  (or: pip install 'dask[distributed]')"


def is_dask(executor: Any) -> bool:
    """Whether ``executor`` names a Dask cluster: ``'dask'``, a scheduler address or a ``distributed.Client``."""
    if isinstance(executor, str):
        return executor == 'dask' or executor.startswith(_ADDRESS_SCHEMES)
    return type(executor).__module__.startswith('distributed.') and type(executor).__name__ == 'Client'


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as error:
        raise ImportError(f"Expected dask's 'distributed' package for a research on a Dask cluster. Received: "
                          f"{error}. Install the dask extra: {_INSTALL}") from error
    if not hasattr(distributed, 'Client'):
        raise ImportError(f"Expected dask's 'distributed' package. Received: {getattr(distributed, '__file__', None)!r}"
                          f", another module of that name first on sys.path. Rename it, or run from another folder.")
    return distributed


def open_dask(executor: Any, workers: int = 1, *, allowed_failures: int = 0, timeout: float = 60.0) -> DaskExecutor:
    """A ``DaskExecutor`` for ``executor`` (``'dask'``, a scheduler address or a ``distributed.Client``).

    Args:
        executor: what ``Research.run`` received as ``executor``.
        workers: the number of worker processes of a ``LocalCluster`` started for ``'dask'``.
        allowed_failures: for ``'dask'``: how many times a task is run again after its worker died before its
            future raises ``WorkerDied``; 0, as the local pool: the experiment is recorded as failed and a run
            again under the research's name reruns it. A running cluster keeps its own setting (Dask's default: 3).
        timeout: seconds to wait for a cluster to start or a scheduler to answer.
    """
    distributed = _distributed()
    if isinstance(executor, distributed.Client):
        return DaskExecutor(executor)
    if not isinstance(executor, str) or not is_dask(executor):
        raise ValueError(f"Expected executor='dask', a scheduler address like 'tcp://127.0.0.1:8786' or a "
                         f"distributed.Client. Received: executor={executor!r}.")
    if executor != 'dask':
        return DaskExecutor(distributed.Client(executor, timeout=timeout, set_as_default=False), owned=True)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ValueError(f"Expected workers to be a positive int for executor='dask'. Received: workers={workers!r}.")
    return DaskExecutor(*_local_cluster(distributed, workers, allowed_failures, timeout))


def _local_cluster(distributed: Any, workers: int, allowed_failures: int, timeout: float) -> tuple:
    """A ``LocalCluster`` on 127.0.0.1 and its client. Its workers keep the caller's thread settings, as the local
    pool's do (Dask would set ``OMP_NUM_THREADS=1``): the same experiment computes the same numbers on either."""
    import logging
    import os

    import dask
    environ = {name: value for name, value in dask.config.get('distributed.nanny.pre-spawn-environ').items()
               if not name.endswith('_NUM_THREADS') or name in os.environ}
    settings = {'distributed.scheduler.allowed-failures': int(allowed_failures),
                'distributed.nanny.pre-spawn-environ': {**environ, **{name: os.environ[name] for name in environ
                                                                      if name in os.environ}}}
    with dask.config.set(settings), main_hidden():
        cluster = distributed.LocalCluster(host='127.0.0.1', n_workers=workers, threads_per_worker=1,
                                           processes=True, dashboard_address=None, silence_logs=logging.CRITICAL,
                                           timeout=timeout)
        try:
            client = distributed.Client(cluster, set_as_default=False, timeout=timeout)
        except BaseException:
            cluster.close()
            raise
    return client, cluster


@contextlib.contextmanager
def main_hidden() -> Iterator[None]:
    """While it lasts, ``__main__`` has no file and no spec, so the worker processes Dask spawns (at the start and
    when a nanny restarts a dead worker) do not run the user's script again: no ``if __name__ == '__main__'``.

    Held for the cluster's whole life, so it takes no lock (``flowpipe.execution.workers.hidden_main`` holds one
    for the moment processes start).
    """
    with hidden_main(lock=False):
        yield


class DaskExecutor(Executor):
    """A ``concurrent.futures.Executor`` over a ``distributed.Client``.

    Args:
        client: the client that submits tasks.
        cluster: a cluster this executor started: closed (its processes ended) by ``shutdown``.
        owned: close ``client`` at ``shutdown`` (it is closed anyway when ``cluster`` is given).
    """

    def __init__(self, client: Any, cluster: Any = None, owned: bool = False):
        self.client, self.cluster = client, cluster
        self._owned = owned or cluster is not None
        self._pending: dict[str, tuple[Future, Any]] = {}
        self._lock = threading.Lock()
        self._shutdown = False
        self._main = main_hidden() if cluster is not None else contextlib.nullcontext()
        self._main.__enter__()        # nannies restart dead workers for as long as the cluster lives

    def __repr__(self) -> str:
        return f'DaskExecutor({self.client.scheduler.address!r}, workers={len(self.worker_names())})'

    def worker_names(self) -> list:
        """The names of the cluster's workers now."""
        return [info.get('name') for info in self.client.scheduler_info()['workers'].values()]

    def declared_resources(self) -> set:
        """The names of the resources the cluster's workers declare (``dask worker --resources 'GPU:0=1'``)."""
        return {name for info in self.client.scheduler_info()['workers'].values()
                for name in (info.get('resources') or {})}

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` on a worker of the cluster (a research task: on a worker that declares its
        devices as resources, when the cluster's workers declare any of them)."""
        self._check_open()
        return self.submit_with(fn, args, kwargs, resources=self.resources_for(args[0] if len(args) == 1 else None))

    def resources_for(self, task: Any) -> dict | None:
        """``{device: 1}`` for each device of a research ``task`` that some worker declares as a resource."""
        shares = getattr(task, 'devices', None) or []
        names = {str(device) for share in shares if share is not None
                 for device in (share if isinstance(share, (list, tuple)) else [share])}
        wanted = sorted(names & self.declared_resources()) if names else []
        return {name: 1 for name in wanted} or None

    def submit_with(self, fn: Callable, args: Sequence = (), kwargs: dict | None = None,
                    resources: dict | None = None, name: str = 'flowpipe-experiment') -> Future:
        """Like ``submit``, with Dask resources the task needs on its worker and a readable task name."""
        with self._lock:
            self._check_open()
            key = f'{name}-{uuid.uuid4().hex}'
            task = self.client.submit(fn, *args, key=key, pure=False, resources=resources or None,
                                      **(kwargs or {}))
            future: Future = Future()
            self._pending[key] = (future, task)
        future.add_done_callback(lambda done: self._cancel_if_cancelled(key, done))
        self.client.loop.add_callback(self._transfer, key)
        return future

    def _check_open(self) -> None:
        if self._shutdown:
            raise RuntimeError("Expected a DaskExecutor that is not shut down. Received: a submit after shutdown(); "
                               "open a new executor.")

    def _cancel_if_cancelled(self, key: str, future: Future) -> None:
        if future.cancelled():
            with self._lock:
                entry = self._pending.pop(key, None)
            if entry is not None:
                entry[1].cancel()

    async def _transfer(self, key: str) -> None:
        """In the client's event loop: the task's outcome into its ``concurrent.futures.Future``, then the task's
        result released on the cluster (a worker that dies later makes Dask recompute nothing)."""
        with self._lock:
            entry = self._pending.get(key)
        if entry is None:
            return
        future, task = entry
        outcome = await task._result(raiseit=False)
        with self._lock:
            self._pending.pop(key, None)
        status = task.status
        task.release()
        if status == 'cancelled' or not future.set_running_or_notify_cancel():
            if not future.done():
                future.cancel()
            return
        if status == 'finished':
            future.set_result(outcome)
        else:
            future.set_exception(_exception(outcome))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking tasks; cancel the queued ones (``cancel_futures``) or all (``wait=False``), wait for the
        rest (``wait``); then close the client and the cluster this executor started."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            pending = [future for future, _ in self._pending.values()]
        if cancel_futures or not wait:
            for future in pending:
                future.cancel()
        elif pending:
            wait_futures(pending)
        try:
            if self._owned:
                self.client.close()
            if self.cluster is not None:
                self.cluster.close()
        finally:
            self._main.__exit__(None, None, None)
            for future in pending:          # a cluster closed under a running task: its future ends too
                if not future.done():
                    future.cancel()


def _exception(outcome: Any) -> BaseException:
    """The exception in Dask's ``(type, exception, traceback)`` outcome of a failed task, with its traceback; a
    worker that died under the task (Dask's ``KilledWorker``) as the local pool's ``WorkerDied``."""
    try:
        _, exception, traceback = outcome
    except (TypeError, ValueError):
        return CancelledError(f'the Dask task ended without a result: {outcome!r}')
    if not isinstance(exception, BaseException):
        return RuntimeError(exception)
    if type(exception).__name__ == 'KilledWorker':
        from .pool import WorkerDied
        died = WorkerDied(f"Expected the Dask worker process to finish its task. Received: {exception} (killed, out "
                          f"of memory or a crash in C code).")
        died.__cause__ = exception
        return died
    return exception.with_traceback(traceback)
