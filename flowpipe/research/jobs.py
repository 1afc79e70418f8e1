"""A task: the branches of one experiment that run together, and ``run_task``, which runs one in a worker.

``run_task(task)`` is what any executor runs (the local ``ProcessPool``, a Dask client, the caller itself): it
takes a ``Task`` (plain data, dill-picklable), seeds the process's random generators from the task's first
experiment seed, runs the ``Executor`` and returns one record per experiment (``ExperimentStorage.record``).
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

import numpy as np

from .domain import ConfigAlias
from .executor import Executor

__all__ = ['Task', 'execute_task', 'run_task']


@dataclasses.dataclass
class Task:
    """What one job runs.

    Attributes:
        experiment: the ``Experiment`` definition.
        configs: the branches' configs (``ConfigAlias``), without ``device``.
        ids: the experiments' ids. seeds: their ``SeedSequence`` objects.
        devices: each branch's device share (``None``: no ``device`` key is added).
        n_iters: iterations (``None``: until the units stop).
        options: the ``Executor``'s keyword arguments (target, debug, finalize, profile, loglevel, redirects).
        paths: the experiments' folders (``EP()``), ``None`` entries without one.
        number: the task's number in the research (for the log).
        threads: torch's number of threads (the caller's: some kernels' bits depend on it), ``None`` to leave it.
    """

    experiment: Any
    configs: list
    ids: list
    seeds: list
    devices: list
    n_iters: int | None
    options: dict
    paths: list
    number: int = 0
    threads: int | None = None


def seed_globals(seed: np.random.SeedSequence) -> None:
    """Seed Python's, numpy's and torch's global generators (models initialized in a unit draw from them)."""
    state = seed.spawn(1)[0].generate_state(2)
    random.seed(int(state[0]))
    np.random.seed(int(state[1]) % (2 ** 32))
    import torch                       # imported here even when no unit needs it: a fresh worker and a reused one
    torch.manual_seed(int(state[0]))   # must start each experiment from the same torch state

def execute_task(task: Task, on_iteration: Any = None) -> Executor:
    """Run ``task`` in this process; return its ``Executor`` (its ``experiments`` hold the results);
    ``on_iteration`` as in ``Executor.run``."""
    configs = []
    for config, devices in zip(task.configs, task.devices):
        config = ConfigAlias(config)
        if devices is not None:
            config['device'] = devices
        configs.append(config)
    seed_globals(task.seeds[0])
    if task.threads is not None:
        import torch
        torch.set_num_threads(task.threads)
    executor = Executor(task.experiment, configs=configs, n_iters=task.n_iters, ids=task.ids, seeds=task.seeds,
                        paths=task.paths, task_name=f'Task {task.number}', **task.options)
    executor.run(on_iteration)
    return executor


def run_task(task: Task) -> list[dict]:
    """Run ``task``; return each experiment's record (results, log, output, exception). Runs in a worker."""
    return [experiment.storage.record() for experiment in execute_task(task).experiments]
