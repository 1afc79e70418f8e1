"""How a research's run hands tasks to an executor and takes their records back: ``run_tasks``.

Each worker slot holds at most one task at a time and owns a device share (``split_devices``), so two tasks in
flight never share a slot's devices, whatever executor runs them. Tasks go through any
``concurrent.futures.Executor`` (``submit(run_task, task)``): the local ``ProcessPool`` by default, or one given.
A task whose future fails (its worker died, it did not unpickle) records each of its experiments as failed with
the reason; the others go on. Ctrl-C (or any error in the caller) cancels what has not started and stops the
pool the research made.

``_Watch`` keeps the running tasks' times: a task past the research's ``timeout`` is ended through its executor's
``end(future, error)`` (the local pool terminates its worker and starts another), and a task running far longer
than the finished ones (``SLOW_FACTOR`` times their median and ``SLOW_SECONDS`` more) is named once, so that a
hang is seen with the experiment it is in. A task's time counts from when it began in its worker where the
executor says so (``started(future)``, the local pool), else from when it was submitted.
"""
from __future__ import annotations

import concurrent.futures
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from .jobs import Task, execute_task, run_task

__all__ = ['EXECUTORS', 'ExperimentTimeout', 'make_executor', 'run_tasks']

# A running task is named as slow past SLOW_FACTOR times the median time of the finished ones, and at least
# SLOW_SECONDS more than that median (short experiments vary by more than a factor on a busy machine).
SLOW_FACTOR = 3.0
SLOW_SECONDS = 60.0


class ExperimentTimeout(TimeoutError):
    """A task ran past the research's ``timeout``: its worker was ended."""

# name -> factory(workers) of the executors ``run(executor='name')`` accepts; other backends register here.
EXECUTORS: dict[str, Callable[[int], concurrent.futures.Executor]] = {}


def _local(workers: int) -> concurrent.futures.Executor:
    from .pool import ProcessPool
    return ProcessPool(workers)


EXECUTORS['local'] = EXECUTORS['processes'] = _local


def make_executor(executor: Any, workers: int) -> tuple[concurrent.futures.Executor, bool]:
    """``(executor, owned)``: the executor to submit tasks to, and whether the research made it (and stops it)."""
    if executor is None:
        return _local(workers), True
    from . import dask_backend            # no Dask import unless the executor names a Dask cluster
    if dask_backend.is_dask(executor):
        return dask_backend.open_dask(executor, workers), True
    if isinstance(executor, str):
        if executor not in EXECUTORS:
            raise ValueError(f"Expected executor to be one of {sorted(EXECUTORS)}, 'dask', a Dask scheduler address "
                             f"('tcp://host:8786') or a concurrent.futures.Executor. Received: executor={executor!r}.")
        return EXECUTORS[executor](workers), True
    if not callable(getattr(executor, 'submit', None)):
        raise TypeError(f"Expected executor to have submit(fn, *args) -> Future (a concurrent.futures.Executor). "
                        f"Received: {type(executor).__name__}.")
    return executor, False


def failure_records(task: Task, error: BaseException) -> list[dict]:
    """One failed record per experiment of a task whose job did not come back."""
    import traceback
    text = ''.join(traceback.format_exception(error))
    return [{'id': key, 'config': config, 'results': {}, 'log': [], 'stdout': '', 'stderr': '', 'profile': [],
             'exception': text, 'failed': True, 'iterations': 0} for key, config in zip(task.ids, task.configs)]


def run_tasks(tasks: Iterator[Task], shares: list[list[Any]], handle: Callable[[Task, list[dict]], None],
              parallel: bool, executor: Any = None, on_iteration: Any = None, timeout: float | None = None,
              on_slow: Callable[[Task, float, float], None] | None = None) -> None:
    """Run every task, each in a free worker slot with that slot's device ``shares``; ``handle`` its records.

    ``parallel=False`` runs the tasks one after another in this process (exceptions raise when the task's
    ``debug`` option is on; ``on_iteration`` hears of each iteration, as in ``Executor.run``). Otherwise a task
    running past ``timeout`` seconds is ended and recorded as failed (the executor must have ``end(future,
    error)``), and ``on_slow(task, seconds, median)`` hears once of each task running far longer than the others.
    """
    if not parallel:
        for number, task in enumerate(tasks):
            task.devices = shares[number % len(shares)][:len(task.configs)]
            experiments = execute_task(task, on_iteration).experiments
            handle(task, [experiment.storage.record() for experiment in experiments])
        return
    pool, owned = make_executor(executor, len(shares))
    in_flight: dict[concurrent.futures.Future, tuple[Task, int]] = {}
    watch = _Watch(pool, timeout, on_slow)
    free, pending = list(range(len(shares))), iter(tasks)
    clean = False
    try:
        while True:
            while free:
                task = next(pending, None)
                if task is None:
                    break
                slot = free.pop(0)
                task.devices = shares[slot][:len(task.configs)]
                future = pool.submit(run_task, task)
                in_flight[future] = (task, slot)
                watch.submitted(future)
            if not in_flight:
                break
            # a timeout, so that Ctrl-C is seen promptly in the waiting thread
            done, _ = concurrent.futures.wait(list(in_flight), timeout=0.5,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                task, slot = in_flight.pop(future)
                free.append(slot)
                watch.finished(future)
                error = future.exception()
                handle(task, failure_records(task, error) if error is not None else future.result())
            watch.check(in_flight)
        clean = True
    finally:
        for future in in_flight:
            future.cancel()
        if owned:
            pool.shutdown(wait=clean, cancel_futures=True)


class _Watch:
    """The running tasks' times: ends those past ``timeout``, names those far slower than the finished ones."""

    def __init__(self, pool: Any, timeout: float | None, on_slow: Callable | None):
        self.pool, self.timeout, self.on_slow = pool, timeout, on_slow
        self.began: dict[concurrent.futures.Future, float] = {}
        self.durations: list[float] = []
        self.named: set[concurrent.futures.Future] = set()
        self._started = getattr(pool, 'started', None)

    def submitted(self, future: concurrent.futures.Future) -> None:
        if self._started is None:
            self.began[future] = time.monotonic()

    def finished(self, future: concurrent.futures.Future) -> None:
        began = self._began(future)
        self.began.pop(future, None)
        self.named.discard(future)
        if began is not None and not future.cancelled() and future.exception() is None:
            self.durations.append(time.monotonic() - began)

    def check(self, in_flight: dict) -> None:
        now = time.monotonic()
        median = statistics.median(self.durations) if self.durations else None
        for future, (task, _) in in_flight.items():
            began = self._began(future)
            if began is None:
                continue
            elapsed = now - began
            if self.timeout is not None and elapsed > self.timeout:
                self.pool.end(future, ExperimentTimeout(
                    f"Expected the experiment to finish within timeout={self.timeout} s (Research.run). Received: "
                    f"it ran {elapsed:.1f} s; its worker process was ended and replaced. Give it a larger "
                    f"timeout=, or look for where it hangs (run its config alone, or with parallel=False)."))
            elif (self.on_slow is not None and median is not None and future not in self.named
                    and elapsed > max(SLOW_FACTOR * median, median + SLOW_SECONDS)):
                self.named.add(future)
                self.on_slow(task, elapsed, median)

    def _began(self, future: concurrent.futures.Future) -> float | None:
        return self._started(future) if self._started is not None else self.began.get(future)
