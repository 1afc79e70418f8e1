"""``Research``: one experiment run over every config of a domain, spread over workers and devices.

``Research`` owns the definition (domain, experiment, repetitions) and the run's arguments; the configs become
tasks here, ``flowpipe.research.scheduler`` hands them to an executor, ``flowpipe.research.storage`` keeps what
comes back. See docs/research.md.
"""
from __future__ import annotations

import os
import shutil
import warnings
from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import safe_pickle
from ..errors import UnsafeFileError
from ..progress import make_progress
from .devices import split_devices
from .domain import ConfigAlias, Domain
from .domain_checks import check_count, describe
from .executor import experiment_id, experiment_seed
from .experiment import Experiment
from .jobs import Task
from .meta import check_free_memory, environment, git_state
from .monitor import ResearchMonitor, ResearchProfiler
from .pool import ProcessPool
from .scheduler import SLOW_FACTOR, run_tasks
from .storage import ResearchStorage, read_definition

__all__ = ['Research']

_BUILDERS = ('add_callable', 'add_generator', 'add_instance', 'add_pipeline', 'add_namespace', 'save', 'dump',
             'add_executable_unit')
_RUNTIME = ('storage', 'monitor', 'profiler', '_options')
_TRUST = "Research.load({name!r}, trusted=True) (ResearchResults({name!r}) reads its results alone, safely)"


class Research:
    """A domain of configs, an experiment, and how many times each config runs.

    Args:
        name: the research's folder (results with ``dump_results``; a run again under it resumes; a research over
            another domain is refused there).
        domain: a ``Domain`` (or a dict of options); ``None`` runs one config with no options.
        experiment: an ``Experiment``; units may also be added to the research (``add_callable``...).
        n_configs: configs drawn from the domain (default: all of it; required for sampled domains to end).
        n_reps: repetitions of each config (>= 1). repeat_each: configs drawn before they are repeated.
        trusted: read the folder's files with dill, which runs any code they name (records of the user's own
            classes, the definition a folder written before ``seed.txt`` keeps its seed in); by default they are
            read safely (``flowpipe.safe_pickle``) and such a file is refused, naming it.
    """

    def __init__(self, name: str = 'research', domain: Any = None, experiment: Experiment | None = None,
                 n_configs: int | None = None, n_reps: int = 1, repeat_each: int | None = None, *,
                 trusted: bool = False):
        self.name, self.trusted = name, trusted
        self.domain = Domain([[]]) if domain is None else Domain(domain) if isinstance(domain, dict) else domain
        self.experiment = experiment if experiment is not None else Experiment()
        self.n_configs, self.n_reps = check_count('n_configs', n_configs, none=True), check_count('n_reps', n_reps)
        self.repeat_each = check_count('repeat_each', repeat_each, none=True)
        self.entropy: int | None = None
        self.storage: ResearchStorage | None = None
        self.monitor = ResearchMonitor()
        self.profiler = ResearchProfiler([])
        self._options: dict = {}
        self.meta: dict = {}        # git_meta / env_meta of the last run

    def __getattr__(self, name: str) -> Any:
        # the experiment's builders (add_callable...) and functions of its namespaces, returning the research
        experiment = self.__dict__.get('experiment')
        if experiment is None or name.startswith('_') or (name not in _BUILDERS and experiment._lookup(name) is None):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        method = getattr(experiment, name)

        def build(*args: Any, **kwargs: Any) -> Research:
            method(*args, **kwargs)
            return self
        return build

    def update_domain(self, function: Any, when: Any, **kwargs: Any) -> Research:
        """Replace the domain with ``function(**kwargs)`` when ``when`` matches the configs produced so far
        (``R()`` in ``kwargs`` is the results); ``n_items``, ``n_reps``, ``repeat_each`` set the new one's iteration."""
        self.domain.set_update(function, when, **kwargs)
        return self

    # ----- running -----
    def run(self, name: str | None = None, workers: int = 1, branches: int = 1, n_iters: int | None = None,
            devices: Any = None, executor_class: Any = None, dump_results: bool = True, parallel: bool = True,
            executor_target: str = 'threads', loglevel: str | None = None, bar: Any = True, detach: bool = False,
            debug: bool = False, finalize: bool = True, git_meta: bool = False, env_meta: bool = False,
            seed: Any = None, profile: Any = False, memory_ratio: float | None = None, n_gpu_checks: int = 3,
            gpu_check_delay: float = 5, create_id_prefix: Any = False, redirect_stdout: Any = True,
            redirect_stderr: Any = True, executor: Any = None, timeout: float | None = None) -> Research:
        """Run every config's experiment (see docs/research.md for each argument); returns the research.

        ``parallel=False`` runs the experiments one after another in this process; otherwise they run as tasks
        (``branches`` configs each) on ``executor`` — the local pool of ``workers`` processes by default, or any
        ``concurrent.futures.Executor``. ``devices`` are divided between worker slots and branches. ``timeout``:
        seconds a task (its experiments) may run in its worker before it is ended and recorded as failed.
        """
        self.name = name or self.name
        out = _redirect(redirect_stdout, dump_results, 'stdout')
        err = _redirect(redirect_stderr, dump_results, 'stderr')
        self._check(workers, branches, debug, parallel, executor_target, detach)
        self._check_ends()
        _check_timeout(timeout, parallel, executor)
        if executor_class is not None:
            raise ValueError(f"Expected executor_class=None: flowpipe runs experiments through run(executor=...), any "
                             f"concurrent.futures.Executor, 'dask' or a Dask address. Received: executor_class="
                             f"{executor_class!r}.")
        if memory_ratio is not None:
            check_free_memory(devices, memory_ratio, n_gpu_checks, gpu_check_delay)
        self.meta = {'git': git_state() if git_meta else None, 'env': environment() if env_meta else None}
        self.n_iters = 1 if n_iters is None and self.experiment.only_callables else n_iters
        self.workers, self.branches, self.devices = workers, branches, devices
        self.storage = ResearchStorage(self.name, dump_results, out, err, loglevel or 'info', self.trusted)
        self.storage.check_same(describe(self.domain))
        self._seed(seed, dump_results, create_id_prefix)
        self._options = {'target': executor_target, 'debug': debug, 'finalize': finalize, 'profile': profile,
                         'loglevel': loglevel or 'info', 'redirect_stdout': bool(out), 'redirect_stderr': bool(err)}
        self.monitor, self.profiler = ResearchMonitor(), ResearchProfiler([])
        self.storage.save_research(self)
        done = self.storage.finished()
        self.storage.info(f"Research is starting: {len(done)} experiments already finished")
        progress = make_progress(bar, self._bar_total(len(done)))
        live: dict[str, int] = {}

        def on_iteration(experiments: list) -> None:      # in this process only: a live count of iterations
            for running in experiments:
                live[running.id] = live.get(running.id, 0) + 1
            if self.n_iters:
                progress.update(len(experiments))

        try:
            run_tasks(self._tasks(done), split_devices(devices, workers, branches),
                      lambda task, records: self._handle(records, progress, live), parallel, executor, on_iteration,
                      timeout, self._slow)
        except KeyboardInterrupt:
            self.storage.info("Research has been stopped by KeyboardInterrupt.")
            raise
        finally:
            progress.close()
        self.storage.info("Research has been finished")
        return self

    def _seed(self, seed: Any, dump_results: bool, create_id_prefix: Any) -> None:
        """The research's entropy (given, else the one a resumed research kept, else fresh); the domain's iteration."""
        stored = ResearchStorage.read_entropy(self.name, self.trusted) if dump_results else None
        if isinstance(seed, np.random.SeedSequence):
            seed = seed.entropy
        self.entropy = int(np.random.SeedSequence(seed).entropy) if seed is not None else \
            stored if stored is not None else int(np.random.SeedSequence().entropy)
        self.domain.set_iter_params(n_items=self.n_configs, n_reps=self.n_reps, repeat_each=self.repeat_each,
                                    create_id_prefix=create_id_prefix, seed=self.entropy)

    def _check(self, workers: Any, branches: Any, debug: bool, parallel: bool, target: str, detach: bool) -> None:
        for label, value in (('workers', workers), ('branches', branches)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Expected {label} to be an int >= 1. Received: {label}={value!r}.")
        if debug and (parallel or target not in ('f', 'for')):
            raise ValueError("Expected parallel=False and executor_target='f' with debug=True (the exception is "
                             f"raised in this process). Received: parallel={parallel!r}, executor_target={target!r}.")
        if detach:
            raise ValueError("Expected detach=False: flowpipe runs a research in the caller (run it in a thread or "
                             "a subprocess to detach it). Received: detach=True.")

    def _check_ends(self) -> None:
        """A domain whose options are all samplers has no end: without ``n_configs`` (or a domain update that
        replaces it) the research would draw configs until it is stopped."""
        if self.n_configs is None and self.domain.len is None and not self.domain.updates:
            raise ValueError(f"Expected n_configs for a domain of samplers only (it draws configs without end). "
                             f"Received: n_configs=None, domain={self.domain!r}. Pass Research(..., n_configs=100) "
                             f"to run 100 drawn configs, or give the options lists of values.")

    def _configs(self) -> Iterator[tuple[str, ConfigAlias]]:
        """``(id, config)`` for every config of the domain, updates included."""
        domain, generated, seen = self.domain, 0, Counter()
        iterator = domain.iterator
        while True:
            config = next(iterator, None)
            if config is None:
                return
            generated += 1
            clean = ConfigAlias(config)
            prefix = clean.pop_config('_prefix')
            for key in [key for key in clean.keys() if isinstance(key, str) and key.startswith('#')]:
                clean.pop_config(key)
            text = clean.alias(as_string=True)
            key = (prefix.config()['_prefix'] if prefix is not None else '') + experiment_id(clean, seen[text])
            seen[text] += 1
            yield key, clean
            new = domain.update(generated, self)
            if new is not None:
                domain, iterator = new, new.iterator

    def _tasks(self, done: set[str]) -> Iterator[Task]:
        batch: list[tuple[str, ConfigAlias]] = []
        number = 0
        for key, config in self._configs():
            if key in done:
                continue
            batch.append((key, config))
            if len(batch) == self.branches:
                yield self._task(batch, number)
                batch, number = [], number + 1
        if batch:
            yield self._task(batch, number)

    def _task(self, batch: list, number: int) -> Task:
        import torch
        ids = [key for key, _ in batch]
        return Task(self.experiment, [config for _, config in batch], ids,
                    [experiment_seed(self.entropy, key) for key in ids], [None] * len(batch), self.n_iters,
                    dict(self._options), [self.storage.path(key) for key in ids], number, torch.get_num_threads())

    def _bar_total(self, done: int) -> int | None:
        """The bar counts iterations (``n_iters`` given) or experiments; ``None`` for an endless domain."""
        size = self.domain.size
        if size is None or self.domain.updates:
            return None
        return max(size - done, 0) * (self.n_iters or 1)

    def _handle(self, records: list[dict], progress: Any, live: dict[str, int]) -> None:
        for record in records:
            self.storage.write(record)
            self.monitor.add(record)
            self.profiler.add(record.get('profile', []))
            if record.get('exception'):
                self.storage.info(f"Experiment {record['id']} failed:\n{record['exception']}")
                if getattr(progress, 'bar', None) is not None:
                    progress.bar.set_description_str(f'Exceptions: {len(self.monitor.exceptions)}')
            # iterations a parallel run could not report live (a stopped experiment counts its iterations left)
            progress.update((self.n_iters or 1) - live.pop(record['id'], 0) if self.n_iters else 1)

    def _slow(self, task: Task, seconds: float, median: float) -> None:
        """Name a task running far longer than the finished ones: in the log and as a warning."""
        names = ', '.join(f'{key} ({config.alias(as_string=True)})' for key, config in zip(task.ids, task.configs))
        message = (f"Experiment {names} has been running for {seconds:.0f} s, more than {SLOW_FACTOR:g} times the "
                   f"median of the finished ones ({median:.1f} s): it may hang. Research.run(timeout=...) ends "
                   f"an experiment past a time limit.")
        self.storage.info(message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)

    # ----- reading -----
    @property
    def results(self) -> Any:
        """The ``ResearchResults`` (``.df`` for the table)."""
        if self.storage is None:
            raise ValueError("Expected a research that has run (research.run(...)) or was loaded "
                             "(Research.load(name)). Received: one that has not run yet.")
        return self.storage.results

    def __getstate__(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key not in _RUNTIME}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({'trusted': False, **state})     # a definition saved before ``trusted`` existed
        self.storage, self.monitor, self.profiler, self._options = None, ResearchMonitor(), ResearchProfiler([]), {}

    def __repr__(self) -> str:
        return f'Research({self.name!r}, domain={self.domain!r}, n_reps={self.n_reps})\n{self.experiment!r}'

    @classmethod
    def load(cls, name: str, trusted: bool = False) -> Research:
        """The research saved under ``name``, with its results read from there. Its definition
        (``research.dill``) holds the experiment's units, the user's own functions: it is read safely
        (``flowpipe.safe_pickle``) and refused when it names such code, unless ``trusted`` (dill runs whatever
        the file holds) or this process wrote the file itself (the same bytes, by their SHA-256 digest).
        ``ResearchResults(name)`` reads the results alone."""
        if not os.path.isdir(name):
            raise FileNotFoundError(f"Expected a research folder. Received: {name!r}, which does not exist.")
        path = os.path.join(name, 'research.dill')
        research = None
        if os.path.exists(path):
            try:
                research = read_definition(path, trusted)
            except UnsafeFileError as error:
                raise safe_pickle.unsafe(error, path, 'a research definition', _TRUST.format(name=name)) from None
        research = research if research is not None else cls(name=name)
        research.name, research.trusted = name, trusted
        research.storage = ResearchStorage(name, True, 0, 0, trusted=trusted)
        return research

    @classmethod
    def remove(cls, name: str, ask: bool = True, force: bool = False) -> None:
        """Delete the research folder ``name`` (``ask``: after a yes on the console)."""
        if not os.path.exists(name):
            return
        if not force and not os.path.exists(os.path.join(name, 'experiments')):
            raise ValueError(f"Expected a research folder (with experiments/). Received: {name!r}; pass force=True "
                             "to delete it anyway.")
        if ask and input(f'Remove {name}? [y/n] ').strip().lower() not in ('y', 'yes'):
            return
        shutil.rmtree(name)


def _check_timeout(timeout: Any, parallel: bool, executor: Any) -> None:
    """``timeout`` ends a worker: only where experiments run in the local pool's processes."""
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"Expected timeout to be a number of seconds > 0 or None. Received: timeout={timeout!r}.")
    if not parallel or not (executor in (None, 'local', 'processes') or isinstance(executor, ProcessPool)):
        raise ValueError(f"Expected parallel=True and the local pool (executor=None) with timeout=: an experiment "
                         f"past its time is ended with its worker process, which only the local pool can do. "
                         f"Received: parallel={parallel!r}, executor={executor!r}, timeout={timeout!r}.")


def _redirect(value: Any, dump: bool, stream: str) -> int:
    """batchflow's redirect codes: 0 none, 1 common file, 2 per experiment, 3 both; True means 1 (2 in memory)."""
    if value is True:
        return 1 if dump else 2
    if value in (False, None, 0):
        return 0
    if value not in (1, 2, 3):
        raise ValueError(f"Expected redirect_{stream} to be True, False, 0, 1, 2 or 3. Received: {value!r}.")
    if not dump and value in (1, 3):
        raise ValueError(f"Expected redirect_{stream} to be 0 or 2 when dump_results=False (no folder to write a "
                         f"common file to). Received: redirect_{stream}={value!r}.")
    return value
