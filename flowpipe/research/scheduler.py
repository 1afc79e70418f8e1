"""How a research's run hands tasks to an executor and takes their records back: ``run_tasks``.

Each worker slot holds at most one task at a time and owns a device share (``split_devices``), so two tasks in
flight never share a slot's devices, whatever executor runs them. Tasks go through any
``concurrent.futures.Executor`` (``submit(run_task, task)``): the local ``ProcessPool`` by default, or one given.
A task whose future fails (its worker died, it did not unpickle) records each of its experiments as failed with
the reason; the others go on. Ctrl-C (or any error in the caller) cancels what has not started and stops the
pool the research made.
"""
from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator
from typing import Any

from .jobs import Task, execute_task, run_task

__all__ = ['EXECUTORS', 'make_executor', 'run_tasks']

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
              parallel: bool, executor: Any = None, on_iteration: Any = None) -> None:
    """Run every task, each in a free worker slot with that slot's device ``shares``; ``handle`` its records.

    ``parallel=False`` runs the tasks one after another in this process (exceptions raise when the task's
    ``debug`` option is on; ``on_iteration`` hears of each iteration, as in ``Executor.run``).
    """
    if not parallel:
        for number, task in enumerate(tasks):
            task.devices = shares[number % len(shares)][:len(task.configs)]
            experiments = execute_task(task, on_iteration).experiments
            handle(task, [experiment.storage.record() for experiment in experiments])
        return
    pool, owned = make_executor(executor, len(shares))
    in_flight: dict[concurrent.futures.Future, tuple[Task, int]] = {}
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
                in_flight[pool.submit(run_task, task)] = (task, slot)
            if not in_flight:
                break
            # a timeout, so that Ctrl-C is seen promptly in the waiting thread
            done, _ = concurrent.futures.wait(list(in_flight), timeout=0.5,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                task, slot = in_flight.pop(future)
                free.append(slot)
                error = future.exception()
                handle(task, failure_records(task, error) if error is not None else future.result())
        clean = True
    finally:
        for future in in_flight:
            future.cancel()
        if owned:
            pool.shutdown(wait=clean, cancel_futures=True)
