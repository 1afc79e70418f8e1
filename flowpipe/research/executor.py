"""``Executor``: runs the branches of one task (several configs of one experiment) iteration by iteration.

At each iteration every unit runs in the order it was added: a ``root`` unit once for all branches (its output
shared), the others for each branch — in turn (``target='f'``) or in threads (``target='t'``). The executor stops
when ``n_iters`` iterations are done or every branch has stopped (a generator ended or a unit failed).
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..config import Config
from .domain import ConfigAlias
from .running import RunningExperiment, TeeStream

__all__ = ['Executor', 'experiment_id', 'experiment_seed']

_TARGETS = {'f': 'f', 'for': 'f', 't': 't', 'threads': 't'}


def experiment_id(config: ConfigAlias, occurrence: int = 0) -> str:
    """A stable id from the config's printed form (same config, same id, in any process and any order)."""
    text = config.alias(as_string=True) + ('' if occurrence == 0 else f'#{occurrence}')
    return hashlib.md5(text.encode('utf-8')).hexdigest()[:12]        # noqa: S324 (a name, not security)


def experiment_seed(entropy: int, experiment_key: str) -> np.random.SeedSequence:
    """The experiment's seed: the research's entropy and a key from the experiment's id (never from run order)."""
    digest = experiment_key.rsplit('_', 1)[-1]            # without create_id_prefix's codes
    words = [int(digest[i:i + 8], 16) for i in range(0, len(digest), 8)]
    return np.random.SeedSequence(entropy, spawn_key=tuple(words))


class Executor:
    """Runs ``experiment`` for each of ``configs`` (the branches) for ``n_iters`` iterations.

    Args:
        experiment: the ``Experiment`` (or a ``Research``'s experiment).
        configs: one config per branch (dicts or ``ConfigAlias``); default one empty config.
        branches_configs: configs added to each branch's; executor_config: added to all.
        target: ``'f'`` branches in turn, ``'t'`` branches in threads.
        n_iters: iterations; ``None`` until every branch stops.
        ids, seeds: each branch's experiment id and ``SeedSequence`` (default: from the config and ``seed``).
        seed: the entropy seeds derive from when ``seeds`` is not given.
        debug: raise a unit's exception instead of recording it. finalize: go on with the remaining units of an
            iteration after a failure. profile: record the time of each unit. loglevel: 'info' or 'debug'.
        paths: each branch's folder (``EP()``). redirect_stdout, redirect_stderr: capture the units' output.
    """

    def __init__(self, experiment: Any, configs: Any = None, branches_configs: Any = None,
                 executor_config: Any = None, target: str = 'threads', n_iters: int | None = None,
                 ids: list | None = None, seeds: list | None = None, seed: Any = None, debug: bool = False,
                 finalize: bool = False, profile: Any = False, loglevel: str | None = None,
                 paths: list | None = None, redirect_stdout: Any = True, redirect_stderr: Any = True,
                 task_name: str = 'Task', **kwargs: Any):
        if target not in _TARGETS:
            raise ValueError(f"Expected target to be 'f' (for) or 't' (threads). Received: target={target!r}.")
        if configs is not None and branches_configs is not None and len(configs) != len(branches_configs):
            raise ValueError(f"Expected configs and branches_configs of the same length. Received: {len(configs)} "
                             f"and {len(branches_configs)}.")
        experiment = getattr(experiment, 'experiment', experiment)
        n_branches = len(configs) if configs is not None else len(branches_configs or [None])
        configs = configs or [{} for _ in range(n_branches)]
        branches_configs = branches_configs or [{} for _ in range(n_branches)]
        self.experiment_template, self.target, self.n_iters = experiment, _TARGETS[target], n_iters
        self.debug, self.finalize, self.profile, self.task_name = debug, finalize, int(profile), task_name
        self.redirect = (redirect_stdout, redirect_stderr)
        entropy = int(np.random.SeedSequence(seed if isinstance(seed, int) else None).entropy)
        self.experiments: list[RunningExperiment] = []
        for index, (config, branch) in enumerate(zip(configs, branches_configs)):
            full = _aliased(config) + _aliased(branch) + _aliased(executor_config or {})
            name = ids[index] if ids else experiment_id(full, index)
            key = seeds[index] if seeds else experiment_seed(entropy, name)
            running = RunningExperiment(experiment, index, full, name, key, loglevel or 'info',
                                        paths[index] if paths else None)
            self.experiments.append(running)
        for running in self.experiments:
            running.branches = self.experiments
        for running in self.experiments:
            running.storage.info(f"{task_name}[{running.index}] has been started with config:\n "
                                 f"{running.config_alias!r}")

    def run(self, on_iteration: Any = None) -> list[RunningExperiment]:
        """Run every iteration; return the experiments (their ``results``, ``exception``, ``storage``).

        ``on_iteration(experiments)`` is called after each iteration with the experiments that ran it.
        """
        iterations = range(self.n_iters) if self.n_iters else itertools.count()
        with contextlib.ExitStack() as stack:
            pool = stack.enter_context(ThreadPoolExecutor(len(self.experiments), thread_name_prefix='research')) \
                if self.target == 't' and len(self.experiments) > 1 else None
            for iteration in iterations:
                for name, unit in self.experiment_template.actions.items():
                    if unit.root or len(self.experiments) == 1:
                        self._call_root(name, iteration)
                    elif pool is not None:
                        for future in [pool.submit(self._call, running, name, iteration)
                                       for running in self.experiments]:
                            future.result()
                    else:
                        for running in self.experiments:
                            self._call(running, name, iteration)
                if on_iteration is not None:
                    on_iteration([running for running in self.experiments if running.iteration == iteration])
                if not any(running.is_alive for running in self.experiments):
                    break
        for running in self.experiments:
            running.storage.info(f"{self.task_name}[{running.index}] has been finished.")
        return self.experiments

    def _call(self, running: RunningExperiment, name: str, iteration: int) -> None:
        if not (self.finalize or not running.is_failed or name.startswith('__')):
            return
        out, err = self.redirect
        storage = running.storage
        with contextlib.ExitStack() as stack:
            if out:
                stack.enter_context(contextlib.redirect_stdout(TeeStream(storage.stdout)))
            if err:
                stack.enter_context(contextlib.redirect_stderr(TeeStream(storage.stderr)))
            running.call(name, iteration, self.n_iters, self.debug, self.finalize, self.profile)

    def _call_root(self, name: str, iteration: int) -> None:
        root = self.experiments[0]
        self._call(root, name, iteration)
        for running in self.experiments[1:]:
            running.share_root(root, name)

    def close(self) -> None:
        """Nothing to release (kept for batchflow's API)."""


def _aliased(config: Any) -> ConfigAlias:
    if isinstance(config, ConfigAlias):
        return config
    return ConfigAlias(dict(config.items(flatten=True)) if isinstance(config, Config) else dict(config))
