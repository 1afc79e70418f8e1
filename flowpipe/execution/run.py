"""The run loop behind ``Pipeline.run``, ``gen_batch`` and ``next_batch``.

batch source (sub-indices from ``dataset.index.gen_batch``) → ``BatchRunner`` (one batch through the actions)
→ ``Prefetcher`` (in order, ``prefetch`` batches ahead; in the caller's thread when 0) → later stages after a
``rebatch`` → progress bar → the caller. The ``before`` section runs when iteration starts, the ``after``
section when it ends (all batches done, or ``StopPipeline``).
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

from ..errors import StopPipeline, add_note
from ..rank0 import is_main
from .agreement import agree_on_run
from .checkpoint import as_checkpoint
from .deterministic import check_deterministic, deterministic
from .epochs import EpochClock
from .events import TrainingRun, check_callbacks
from .locks import OrderedLocks
from .next_iteration import NextIteration
from .nodes import DeferredStage, IndexSource, MapStage
from .prefetch import TARGETS, Prefetcher
from ..data.shards import WHOLE_BATCHES, balanced_bounds, end_sharded_run, run_mesh, run_world, shard_batches
from ..pipeline.stages import pipeline_stages
from .processes import InProcess, check_processes, reattach
from .profile import Profiler
from .rebatch import RebatchStage
from .resume import RunCheckpoints, check_resumable
from .runner import BatchRunner, run_steps
from .signals import GracefulStop
from .steps import compile_plan

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
        if not isinstance(self.resume, (bool, str, os.PathLike)):
            raise TypeError(f"Expected resume as True, False or the path of a checkpoint (file or folder). "
                            f"Received: resume={self.resume!r}")
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
    stream = _batches(pipeline, args, indices, total, seeds, ahead, checkpoints, is_main(), events, clock, block,
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


def _batches(pipeline: Any, args: RunArgs, indices: IndexSource, total: int | None, seeds: tuple[int, bool],
             ahead: bool, checkpoints: RunCheckpoints | None, main: bool = True,
             events: TrainingRun | None = None, clock: EpochClock | None = None,
             block: tuple[int, int] | None = None, stepped: list | None = None) -> Iterator[Any]:
    # Only `pipeline` is kept here, never its state: next_batch passes a weak proxy, so that the iterator its state
    # holds does not keep the pipeline (and the prefetch workers) alive once the user drops it.
    in_processes = args.in_processes
    # A checkpoint is taken, and callbacks are called, between two batches: stateful actions run in the caller's
    # thread, as for gen_batch, so that no batch after a callback's stop reaches a model step.
    defer = not in_processes and ((args.prefetch > 0 and not ahead) or checkpoints is not None or events is not None)
    # a rank's block of whole batches keeps the run's batch numbers: the seeds, I('c') and epochs of one process
    first = 0 if block is None else block[0]
    locks = OrderedLocks(first) if args.prefetch else None
    plan = compile_plan(pipeline.actions, getattr(pipeline.dataset, 'batch_class', None), locks, args.batch_size,
                        defer=defer)
    if events is not None and plan.rebatches:
        raise ValueError("Expected a pipeline without rebatch for a run with callbacks. Received: a rebatch "
                         "action, whose batches do not follow the epochs. Run without callbacks=, or rebatch in "
                         "the dataset instead.")
    runners = _runners(pipeline, args, plan, locks, total, seeds, clock,
                       None if events is None else events.collect)
    sections = runners[0].section_context()
    pipeline.state.declare_variables(pipeline.all_records(), sections)
    if not _run_section(pipeline.before.actions, sections):
        return
    prefetcher = _prefetcher(args, indices, runners[0], locks, bool(plan.deferred))
    if first:
        prefetcher.load_state({'seq': first, 'source': indices.state()})
    stream = _stages(prefetcher, runners, plan, pipeline.dataset if in_processes else None)
    progress = None
    signals = _signals(checkpoints)
    # SIGTERM, SIGUSR1, a first Ctrl-C: noted until the workers are stopped (a second Ctrl-C stops at once)
    with signals if signals is not None else contextlib.nullcontext():
        try:
            if checkpoints is not None:
                checkpoints.check(stream)
                checkpoints.events, checkpoints.signals = events, signals
                checkpoints.restore(stream)
            if events is not None:
                events.start()
            shown = total if block is None else block[1] - block[0]          # a rank's bar counts its own block
            progress = _progress(args.bar if main else False, shown, pipeline.state.variables,   # rank 0's only
                                 checkpoints)
            if events is not None and progress is not None:
                events.write = progress.write           # the epoch summary above the bar, not through it
            # Without prefetch nothing ever waits in a queue: the bar shows no `ready` count.
            yield from _delivered(stream, pipeline, progress, prefetcher if args.prefetch > 0 else None,
                                  checkpoints, seeds, events, signals)
            if stepped is not None:     # every rank ends the sharded run alike (batches skipped on some ranks only)
                end_sharded_run(stepped, pipeline.state.models)
        except BaseException as error:
            if events is not None and not isinstance(error, GeneratorExit):     # a gen_batch loop left early
                events.error = error
            raise
        finally:
            stream.close()
            prefetcher.close()
            if progress is not None:
                progress.close()
            if events is not None:                      # the workers are stopped: on_run_end sees the final state
                events.end()
    if signals is not None:                             # the checkpoint is written: requeue, raise
        signals.stop(checkpoints.world is None or checkpoints.world.rank == 0, checkpoints.spec.requeue)
    _run_section(pipeline.after.actions, sections)


def _signals(checkpoints: RunCheckpoints | None) -> GracefulStop | None:
    """The graceful stop of a run that writes checkpoints with ``on_interrupt`` (``signals.py``)."""
    if checkpoints is None or checkpoints.spec is None or not checkpoints.spec.on_interrupt:
        return None
    return GracefulStop()


def _delivered(stream: Any, pipeline: Any, progress: Any, prefetcher: Prefetcher | None,
               checkpoints: RunCheckpoints | None, seeds: tuple[int, bool],
               events: TrainingRun | None = None, signals: GracefulStop | None = None) -> Iterator[Any]:
    """The batches of ``stream``, counted, shown on the bar, announced to the callbacks and checkpointed as the
    caller asks for the next; a callback's stop, or a stop signal (agreed by the ranks), ends the stream after
    the batch."""
    try:
        for batch in stream if events is None or not events.stopped else ():
            pipeline.state.batches += 1
            if progress is not None:
                progress.update(1, ready=None if prefetcher is None else prefetcher.ready)
            try:
                yield batch
            except GeneratorExit:                   # the caller is done with this batch, and leaves
                if events is not None:
                    events.batch_end(batch)
                if checkpoints is not None:
                    checkpoints.done += 1
                raise
            stop = events is not None and events.batch_end(batch)
            if checkpoints is not None:
                agreed = checkpoints.after_batch(stream, seeds, 0 if signals is None else signals.first)
                if signals is not None:
                    signals.agreed = agreed
                stop = stop or bool(agreed)
            if stop:
                break
        if checkpoints is not None:
            checkpoints.finish(stream, seeds, interrupted=False)
    except (KeyboardInterrupt, GeneratorExit):
        if checkpoints is not None:
            checkpoints.finish(stream, seeds, interrupted=True)
        raise


def _stages(prefetcher: Prefetcher, runners: list, plan: Any, dataset: Any) -> Any:
    """The nodes after the prefetcher: batches back from worker processes, deferred steps, later stages."""
    stream: Any = prefetcher
    if dataset is not None:
        stream = MapStage(stream, lambda batch: reattach(batch, dataset))
    if plan.deferred:
        stream = DeferredStage(stream, runners.pop(1))
    for runner, options in zip(runners[1:], plan.rebatches):
        stream = RebatchStage(stream, runner, **options)
    return stream


def _runners(pipeline: Any, args: RunArgs, plan: Any, locks: Any, total: int | None,
             seeds: tuple[int, bool], clock: EpochClock | None = None, on_logs: Any = None) -> list:
    """A runner per stage; with deferred steps, theirs comes second (stage 0 too, so the same seeds); the first
    stage's tell ``on_logs`` the batches' logs (the callbacks' run)."""
    profiler = Profiler(detailed=args.profile in ('detailed', 2)) if args.profile else None
    if profiler is not None:
        pipeline.state.profiler = profiler
    parts = [(0, plan.stages[0], locks if plan.locked else None)]
    if plan.deferred:
        parts.append((0, plan.deferred, None))
    parts += [(stage, steps, None) for stage, steps in enumerate(plan.stages[1:], 1)]
    firsts = itertools.accumulate((len(steps) for _, steps, _ in parts), initial=0)
    return [BatchRunner(pipeline, steps, seeds[0], stage, total if stage == 0 else None, stage_locks, profiler,
                        first, seeds[1], clock if stage == 0 else None, on_logs if stage == 0 else None)
            for (stage, steps, stage_locks), first in zip(parts, firsts)]


def _prefetcher(args: RunArgs, indices: Iterator, runner: BatchRunner, locks: Any, started: bool) -> Prefetcher:
    """The prefetcher of the first stage: whole batches, or (``started``) contexts for the deferred steps."""
    in_processes = args.in_processes
    process = InProcess(runner) if in_processes else runner.start if started else runner.process
    pool = None
    try:
        pool = (_worker_pool(runner.pipeline.state, args.workers or args.prefetch, runner.dataset) if in_processes
                else None)
        return Prefetcher(indices, process, args.prefetch, target=args.target, workers=args.workers, pool=pool,
                          on_close=None if locks is None else locks.close)
    except Exception as error:
        if pool is not None:
            pool.end_run()                          # free for the next run
        if in_processes:
            add_note(error, "flowpipe: target='processes' sends the dataset, config, variables and models to "
                            "every worker with dill; use target='threads' for state that cannot be pickled.")
        raise


def _worker_pool(state: Any, workers: int, dataset: Any) -> Any:
    """The pipeline's worker processes, started on its first ``target='processes'`` run and kept for the next
    (epochs, runs, ``gen_batch`` loops); ``None`` while another run of the pipeline uses them (that run then starts
    its own, stopped when it ends). A run asking for another number of workers replaces them. The dataset, part of
    the pipeline's definition, goes to each worker once, not with every run."""
    with state.lock:
        pool = state.workers
        if pool is not None and not pool.closed and pool.in_use:
            return None
        if pool is None or pool.closed or pool.workers != workers:
            state.close_workers()
            from .workers import WorkerPool
            state.workers = pool = WorkerPool(workers)
        pool.keep(dataset)
        pool.in_use = True                          # taken before the lock is released: one run at a time
        return pool


def _run_section(records: tuple, ctx: Any) -> bool:
    """Run a ``before``/``after`` section; ``False`` when an action raised ``StopPipeline``."""
    if not records:
        return True
    plan = compile_plan(records, None, None, 1)
    try:
        run_steps(plan.stages[0], ctx)
    except StopPipeline:
        return False
    return True


def _progress(bar: Any, total: int | None, variables: Any, checkpoints: RunCheckpoints | None) -> Any:
    if not bar:
        return None
    from ..progress import make_progress
    progress = make_progress(bar, total, variables)
    if checkpoints is not None and checkpoints.done:
        progress.update(checkpoints.done)          # a resumed run's bar starts where the checkpoint was
    return progress
