"""The run behind ``Pipeline.run``, ``gen_batch`` and ``next_batch``: its arguments (``RunArgs``) and its set-up.

batch source (sub-indices from ``dataset.index.gen_batch``) → ``BatchRunner`` (one batch through the actions)
→ ``Prefetcher`` (in order, ``prefetch`` batches ahead; in the caller's thread when 0) → later stages after a
``rebatch`` → progress bar → the caller. The ``before`` section runs when iteration starts, the ``after``
section when it ends (all batches done, or ``StopPipeline``).

This module checks the arguments, agrees on the run with the other ranks of a distributed job (seeds, which
batches each rank reads: a shard of every batch, or a block of whole ones under ``whole_batches``), sets up run
checkpoints and the index source; the loop itself, its stages and their closing are in ``run_loop.py``.
"""
from __future__ import annotations

import contextlib
import itertools
import numbers
import os
import weakref
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Iterator, Mapping

import numpy as np

from ..rank0 import is_main
from .agreement import agree_on_run
from .checkpoint import Checkpoint, as_checkpoint
from .deterministic import check_deterministic, deterministic
from .epochs import EpochClock
from .events import TrainingRun, check_callbacks
from .next_iteration import NextIteration
from .nodes import IndexSource
from .prefetch import TARGETS
from ..data.shards import WHOLE_BATCHES, balanced_bounds, run_mesh, run_world, shard_batches
from ..pipeline.stages import pipeline_stages
from .processes import check_processes
from .resume import RunCheckpoints, check_resumable
from .run_loop import run_batches

__all__ = ['RunArgs', 'iterate', 'next_batch', 'run_pipeline', 'whole_batches']


@contextlib.contextmanager
def whole_batches(split: bool = True) -> Iterator[None]:
    """Runs started inside give every rank of a distributed job whole batches, never a shard of one (``Validate``).

    With ``split`` the ranks take contiguous blocks of the run's batches (rank 0 the first ones, block sizes
    differing by at most one): every batch is processed once, by one rank, as one process processes it, under its
    number in the run (its seed, ``I('c')``, its epoch). Without, every rank processes every batch. Outside a
    distributed job nothing changes.
    """
    token = WHOLE_BATCHES.set('split' if split else 'every')
    try:
        yield
    finally:
        WHOLE_BATCHES.reset(token)


@dataclass(frozen=True)
class RunArgs:
    """The arguments of one run (``None`` limits: one epoch for ``run``/``gen_batch``, infinite for ``next_batch``).

    The fields are the one list of run options: ``run``, ``gen_batch`` and ``next_batch`` pass theirs with
    ``options(locals())``, ``merge`` fills the rest and ``check`` refuses what no run could use.
    """
    batch_size: int | None = None
    shuffle: bool | int = False
    n_epochs: int | None = None
    n_iters: int | None = None
    drop_last: bool = False
    whole_epochs: bool = False
    bar: Any = False
    prefetch: int = 0
    target: str = 'threads'
    workers: int | None = None
    seed: int | None = None
    profile: bool = False
    checkpoint: Any = None
    resume: Any = False
    callbacks: tuple = ()
    summary: bool = True
    deterministic: bool | str = False
    extra: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def options(cls, values: Mapping[str, Any]) -> dict[str, Any]:
        """The run options among ``values`` (a method's arguments: ``locals()``), by their field names."""
        return {name: values[name] for name in _OPTIONS if name in values}

    @property
    def in_processes(self) -> bool:
        """Whether batches are processed in worker processes (``prefetch > 0`` and ``target='processes'``)."""
        return self.prefetch > 0 and self.target == 'processes'

    @classmethod
    def merge(cls, stored: RunArgs | None, *, extra: Mapping[str, Any] | None = None, **given: Any) -> RunArgs:
        """``stored`` (from ``run(lazy=True)``) updated with the arguments given as anything but ``None``.

        Giving either ``n_epochs`` or ``n_iters`` replaces both stored limits.
        """
        changes = {key: value for key, value in given.items() if value is not None}
        if 'n_epochs' in changes or 'n_iters' in changes:
            changes.setdefault('n_epochs', None)
            changes.setdefault('n_iters', None)
        if 'callbacks' in changes:
            changes['callbacks'] = check_callbacks(changes['callbacks'])
        base = stored if stored is not None else cls()
        if extra:
            changes['extra'] = MappingProxyType({**base.extra, **extra})
        args = replace(base, **changes)
        args.check()
        return args

    def check(self) -> None:
        """Raise ``ValueError``/``TypeError`` for arguments no run could use."""
        for name in ('batch_size', 'n_epochs', 'n_iters'):
            _check_count(name, getattr(self, name), allow_none=True)
        _check_count('prefetch', self.prefetch, allow_none=False, minimum=0)
        _check_count('workers', self.workers, allow_none=True)
        for name in ('whole_epochs', 'summary'):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"Expected {name} to be True or False. Received: {name}={getattr(self, name)!r}")
        if self.target not in TARGETS:
            raise ValueError(f"Expected target to be one of {TARGETS}. Received: target={self.target!r}")
        if self.seed is not None and not isinstance(self.seed, (numbers.Integral, np.random.SeedSequence)):
            raise TypeError(f"Expected seed to be an int or None. Received: seed={self.seed!r}")
        as_checkpoint(self.checkpoint)
        check_deterministic(self.deterministic)
        if not isinstance(self.resume, (bool, str, os.PathLike, Checkpoint)):
            raise TypeError(f"Expected resume as True, False, the path of a checkpoint (file or folder) or a "
                            f"Checkpoint(path, trusted=...). Received: resume={self.resume!r}")
        if self.callbacks and self.in_processes:
            raise ValueError("Expected target='threads' for a run with callbacks. Received: target='processes', "
                             "whose workers' model steps the run's callbacks could not follow. Use "
                             "target='threads', or run without callbacks=.")

    def __repr__(self) -> str:
        defaults = RunArgs()
        shown = [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self)
                 if getattr(self, f.name) != getattr(defaults, f.name)]
        return f"RunArgs({', '.join(shown)})"


# The options that run, gen_batch and next_batch take by name (``extra`` gathers the other keyword arguments).
_OPTIONS = tuple(f.name for f in fields(RunArgs) if f.name != 'extra')


def _check_count(name: str, value: Any, allow_none: bool, minimum: int = 1) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"Expected {name} to be an int. Received: {name}={value!r}")
    if value < minimum:
        raise ValueError(f"Expected {name} >= {minimum}. Received: {name}={value!r}")


def run_pipeline(pipeline: Any, args: RunArgs, reset: Any = None) -> Any:
    """Process every batch of the run; returns ``pipeline``."""
    batches = iterate(pipeline, args, reset, ahead=True)
    try:
        for _ in batches:
            pass
    finally:
        batches.close()
    return pipeline


def next_batch(pipeline: Any, args: RunArgs, reset: Any = None) -> Any:
    """The next batch of the iteration kept in the pipeline's state (a new one for new arguments).

    A batch that raises ends the iteration: later calls raise ``RuntimeError`` until ``reset='iter'``.
    """
    state = pipeline.state
    with state.lock:
        if reset is not None:
            pipeline.reset(*_targets(reset))
        if state.iterator is None or state.iterator_args != args:
            state.close_iterator()
            # A weak proxy: the state holds this iterator, which must not keep the pipeline alive in turn.
            state.iterator = NextIteration(iterate(weakref.proxy(pipeline), args, infinite=True))
            state.iterator_args = args
        return next(state.iterator)


def iterate(pipeline: Any, args: RunArgs, reset: Any = None, infinite: bool = False,
            ahead: bool = False) -> Iterator[Any]:
    """A generator of the run's processed batches; bad arguments raise here, before any batch.

    With prefetch, ``ahead=True`` (``run``: every batch is asked for) lets workers run every action of the first
    stage, stateful ones in batch order; otherwise (``gen_batch``, ``next_batch``) workers run only the actions
    before the first stateful one, and the rest runs when the caller asks for the batch.
    """
    if reset is not None:
        pipeline.reset(*_targets(reset))
    dataset = pipeline.dataset
    if dataset is None:
        raise ValueError("Expected a pipeline bound to a dataset. Received: a pipeline with no dataset. "
                         "Bind one with `pipeline << dataset` or start from dataset.p.")
    if args.batch_size is None:
        raise ValueError("Expected a batch size. Received: batch_size=None. Pass run(batch_size) or store one "
                         "with run(batch_size, lazy=True).")
    if args.in_processes:
        check_processes(pipeline, args.profile)
    n_epochs, n_iters = args.n_epochs, args.n_iters
    if n_epochs is None and n_iters is None and not infinite:
        n_epochs = 1
    whole = WHOLE_BATCHES.get()
    world = None if whole == 'every' else run_world()
    # every rank checks that the others draw the same batches, and takes rank 0's seed: one shuffle and one seed tree
    seeds = agree_on_run(world, pipeline, args, n_epochs, n_iters, (_root_seed(args), _seed_given(args)))
    checkpoints = None
    if args.checkpoint is not None or args.resume:
        check_resumable(pipeline)
        checkpoints = RunCheckpoints(pipeline, args, world)
        seeds = checkpoints.root(seeds)
    if checkpoints is None:
        return _run(pipeline, args, world, whole, seeds, (n_epochs, n_iters), ahead, None)
    try:
        return checkpoints.closing(_run(pipeline, args, world, whole, seeds, (n_epochs, n_iters), ahead, checkpoints))
    except BaseException:
        checkpoints.close()
        raise


def _run(pipeline: Any, args: RunArgs, world: Any, whole: str | None, seeds: tuple[int, bool],
         limits: tuple[int | None, int | None], ahead: bool, checkpoints: RunCheckpoints | None) -> Iterator[Any]:
    """The generator of the run's batches, the arguments checked and the seeds agreed (``iterate``)."""
    dataset, (n_epochs, n_iters) = pipeline.dataset, limits
    # an index's gen_batch is given whole_epochs only when asked for: indices written before it keep working
    sampling = {'whole_epochs': True} if args.whole_epochs else {}
    total = dataset.index.n_batches(args.batch_size, n_iters, n_epochs, args.drop_last, **sampling)
    # the mesh says which part of every batch this rank reads: the ranks of one pipeline read the same items
    mesh = None if world is None else run_mesh(world, pipeline_stages(pipeline.all_records()))
    block = None if world is None or whole is None else _block(total, mesh)
    stepped: list | None = [] if world is not None and block is None else None     # the engines of a sharded run
    if checkpoints is not None and block is None:
        checkpoints.check_limit(total)

    def batches() -> Iterator[Any]:
        drawn = dataset.index.gen_batch(args.batch_size, args.shuffle, n_iters, n_epochs, args.drop_last, seeds[0],
                                        **sampling, **args.extra)
        if world is None:
            return drawn
        # a block's earlier batches are drawn and dropped: no item of theirs is loaded
        if block is not None:
            return itertools.islice(drawn, *block)
        agreement = None if checkpoints is None else checkpoints.agreement
        return shard_batches(drawn, mesh.data_rank, mesh.data_size, stepped, agreement)
    try:
        indices = IndexSource(batches)
    except TypeError as error:
        if not args.extra:
            raise
        raise TypeError(f"Expected run arguments that the index's gen_batch accepts. Received: "
                        f"{dict(args.extra)!r}. Check the spelling of the run() keyword arguments.") from error
    clock = EpochClock(len(dataset.index), args.batch_size, args.drop_last, n_epochs, args.whole_epochs)
    events = TrainingRun(pipeline, args.callbacks, clock, world, args.summary, args) if args.callbacks else None
    # rank 0's bar only, also where every rank runs every batch (a Validate with shard=False)
    stream = run_batches(pipeline, args, indices, total, seeds, ahead, checkpoints, is_main(), events, clock, block,
                         stepped)
    return stream if args.deterministic is False else _deterministic(stream, args.deterministic)


def _deterministic(stream: Iterator[Any], mode: bool | str) -> Iterator[Any]:
    """``stream`` with torch's deterministic switches on from its first batch until it ends or is closed."""
    with deterministic(mode):
        yield from stream


def _block(total: int | None, mesh: Any) -> tuple[int, int]:
    """This rank's block of a run's ``total`` batches, under ``whole_batches()`` (its pipeline's, with one)."""
    if total is None:
        raise ValueError("Expected a run of a known number of batches to split into blocks over the ranks. "
                         "Received: an infinite run (no n_epochs, no n_iters). Pass n_epochs= or n_iters=.")
    return balanced_bounds(total, mesh.data_size, mesh.data_rank)


def _root_seed(args: RunArgs) -> int:
    if args.seed is not None:
        return int(args.seed.entropy) if isinstance(args.seed, np.random.SeedSequence) else int(args.seed)
    if not isinstance(args.shuffle, bool) and isinstance(args.shuffle, numbers.Integral):
        return int(args.shuffle)
    return int(np.random.SeedSequence().entropy)


def _seed_given(args: RunArgs) -> bool:
    return args.seed is not None or (not isinstance(args.shuffle, bool) and isinstance(args.shuffle, numbers.Integral))


def _targets(reset: Any) -> tuple:
    return (reset,) if isinstance(reset, str) else tuple(reset)
