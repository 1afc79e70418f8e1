"""One experiment while it runs: ``RunningExperiment`` and its ``ExperimentStorage``.

The storage gathers what the experiment records (``results[name][iteration]``), its log lines, its captured
stdout/stderr and its profile rows. It writes nothing itself: the research writes a finished experiment's record
(``ExperimentStorage.record``) atomically under its folder, so that a worker needs no access to that folder.
"""
from __future__ import annotations

import copy
import cProfile
import io
import pstats
import time
import traceback
from typing import Any

import numpy as np

from .domain import ConfigAlias

__all__ = ['ExperimentStorage', 'RunningExperiment', 'TeeStream']


class TeeStream:
    """A text stream that writes to several others; each ``write`` ends with a separator line (batchflow's form
    of captured output: a print gives its text and its newline as two separated writes)."""

    def __init__(self, *streams: Any):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text + '\n' + '-' * 30 + '\n')
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


class ExperimentStorage:
    """What one experiment records: results, log lines, captured output, profile rows, dump requests."""

    def __init__(self, experiment: RunningExperiment, loglevel: str = 'info', path: str | None = None):
        self.experiment, self.loglevel, self.path = experiment, loglevel, path
        self.results: dict[str, dict[int, Any]] = {}
        self.log: list[str] = []
        self.stdout, self.stderr = io.StringIO(), io.StringIO()
        self.profile_rows: list[dict] = []
        self.dumps = 0

    def update_variable(self, name: str, value: Any) -> None:
        """Record ``value`` under ``name`` at the experiment's current iteration: a copy, so that a list a pipeline
        goes on appending to (``V('loss', mode='a')``) is recorded as it is now; a value that cannot be copied is
        recorded as the object itself."""
        try:
            value = copy.deepcopy(value)
        except Exception:       # locks, generators, open files: nothing a later iteration could rewrite in a table
            pass
        self.results.setdefault(name, {})[self.experiment.iteration] = value

    def request_dump(self, variable: Any = None) -> None:
        """Count a dump request: the research writes the whole record when the experiment ends."""
        self.dumps += 1

    def info(self, message: str) -> None:
        """A log line at level INFO."""
        self.log.append(f'{time.strftime("%y-%m-%d %H:%M:%S")} - INFO - {message}')

    def debug(self, message: str) -> None:
        """A log line at level DEBUG (kept only with ``loglevel='debug'``)."""
        if self.loglevel == 'debug':
            self.log.append(f'{time.strftime("%y-%m-%d %H:%M:%S")} - DEBUG - {message}')

    def record(self) -> dict:
        """Everything the research keeps of the experiment (plain data, picklable)."""
        experiment = self.experiment
        return {'id': experiment.id, 'config': experiment.config_alias, 'results': self.results,
                'log': self.log, 'stdout': self.stdout.getvalue(), 'stderr': self.stderr.getvalue(),
                'profile': self.profile_rows, 'exception': experiment.exception, 'failed': experiment.is_failed,
                'iterations': experiment.iteration + 1 if experiment.iteration is not None else 0}


class RunningExperiment:
    """One config's run of an ``Experiment``: its own units, instances, outputs, results and random state.

    Args:
        template: the ``Experiment`` definition.
        index: the branch number in its task.
        config: the config (``ConfigAlias``), with the ``id`` already removed.
        experiment_id: the experiment's id.
        seed: the experiment's ``SeedSequence``.
        loglevel: ``'info'`` or ``'debug'``.
        path: the experiment's folder (``EP()``), ``None`` without one.
    """

    def __init__(self, template: Any, index: int, config: ConfigAlias, experiment_id: str,
                 seed: np.random.SeedSequence, loglevel: str = 'info', path: str | None = None):
        self.template, self.index, self.id = template, index, experiment_id
        config = ConfigAlias(config)
        for key in [key for key in config.keys() if isinstance(key, str) and (key.startswith('#') or key == '_prefix')]:
            config.pop_config(key)
        self.config_alias, self.config = config, config.config()
        self.random_seed, self.random = seed, np.random.default_rng(seed)
        self.instance_creators = template.instance_creators
        self.actions = {name: unit.bind() for name, unit in template.actions.items()}
        self.instances: dict[str, Any] = {}
        self.outputs: dict[str, Any] = {}
        self.branches: list[RunningExperiment] = [self]
        self.iteration: int | None = None
        self.last = self.is_failed = False
        self.is_alive = True
        self.stopped_at: int | None = None
        self.exception: str | None = None
        self.storage = ExperimentStorage(self, loglevel, path)

    def pipeline_seed(self) -> int:
        """The seed a pipeline unit runs with (from the experiment's seed: repetitions differ, reruns agree)."""
        return int(self.random_seed.generate_state(1)[0])

    @property
    def results(self) -> dict:
        """``results[name][iteration]``: what the experiment recorded."""
        return self.storage.results

    def lookup(self, name: str) -> Any:
        """What ``E(name)`` means: a unit's target or an instance."""
        if name in self.actions:
            return self.actions[name].target(self)
        if name in self.instances:
            return self.instances[name]
        raise ValueError(f"Expected {name!r} to be a unit or an instance of the experiment. Received an unknown "
                         f"name; units: {list(self.actions)}, instances: {list(self.instances)}.")

    def call(self, name: str, iteration: int, n_iters: int | None, debug: bool, finalize: bool,
             profile: int = 0) -> None:
        """Run unit ``name`` at ``iteration``; an exception fails the experiment (raised when ``debug``);
        ``profile``: 1 times the unit, 2 adds cProfile's rows."""
        # a stopped experiment runs only the saving units ('__save', '__dump') of the iteration it stopped at
        if not self.is_alive and not (name.startswith('__') and iteration == self.stopped_at):
            return
        if self.is_failed and not finalize and not name.startswith('__'):
            return
        self.last = self.last or (n_iters is not None and iteration + 1 == n_iters)
        self.iteration = iteration
        started, done = time.perf_counter(), None
        profiler = cProfile.Profile() if profile == 2 else None
        try:
            if profiler is not None:
                profiler.enable()
            try:
                done = self.actions[name](self, iteration, n_iters, self.last)
            finally:
                if profiler is not None:
                    profiler.disable()
            if done is not None:
                self.outputs[name] = done[0]
                self.storage.debug(f"Execute '{name}' [{iteration}/{None if n_iters is None else n_iters - 1}]")
        except StopIteration:
            self.is_failed, self.last = True, True
            self.storage.info(f"Stop '{name}' [{iteration}/{n_iters}]")
        except Exception as error:
            if debug:
                raise
            self.is_failed, self.last = True, True
            self.exception = ''.join(traceback.format_exception(error))
            self.storage.info(f"Fail '{name}' [{iteration}/{n_iters}]: Exception\n{self.exception}")
        if profile:
            self._profile(name, iteration, time.perf_counter() - started, done, profiler)
        if self.is_alive and self.is_failed and (name == list(self.actions)[-1] or not finalize):
            self.is_alive, self.stopped_at = False, iteration

    def _profile(self, name: str, iteration: int, total: float, done: Any, profiler: Any) -> None:
        row = {'experiment': self.id, 'unit': name, 'iter': iteration, 'total_time': total,
               'unit_time': done[1] if done is not None else 0.0}
        if profiler is None:
            self.storage.profile_rows.append(row)
            return
        stats = pstats.Stats(profiler).stats
        for (filename, line, function), (primitive, calls, own, cumulative, _) in stats.items():
            self.storage.profile_rows.append({**row, 'id': f'{filename}:{line}({function})', 'ncalls': calls,
                                              'primitive_calls': primitive, 'tottime': own, 'cumtime': cumulative})

    def share_root(self, root: RunningExperiment, name: str) -> None:
        """Take a root unit's output and state from the first branch."""
        if name in root.outputs:
            self.outputs[name] = root.outputs[name]
        self.is_alive, self.is_failed, self.iteration = root.is_alive, root.is_failed, root.iteration
        self.stopped_at = root.stopped_at
        self.last = root.last
