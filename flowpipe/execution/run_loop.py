"""The loop of one run, once ``run.iterate`` has checked its arguments and agreed on its seeds and batches:
the stages built (a ``BatchRunner`` per stage, the ``Prefetcher`` of the first, ``rebatch`` stages after it), the
``before`` section, the batches delivered to the caller (counted, on the progress bar, announced to the callbacks,
checkpointed), then everything closed, in one place, and the ``after`` section.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import StopPipeline, add_note
from ..data.shards import end_sharded_run
from .epochs import EpochClock
from .events import TrainingRun
from .locks import OrderedLocks
from .nodes import DeferredStage, IndexSource, MapStage
from .prefetch import Prefetcher
from .processes import InProcess, reattach
from .profile import Profiler
from .rebatch import RebatchStage
from .resume import RunCheckpoints
from .runner import BatchRunner, run_steps
from .signals import GracefulStop
from .steps import compile_plan

if TYPE_CHECKING:
    from .run import RunArgs

__all__ = ['run_batches']


def run_batches(pipeline: Any, args: RunArgs, indices: IndexSource, total: int | None, seeds: tuple[int, bool],
             ahead: bool, checkpoints: RunCheckpoints | None, main: bool = True,
             events: TrainingRun | None = None, clock: EpochClock | None = None,
             block: tuple[int, int] | None = None, stepped: list | None = None) -> Iterator[Any]:
    """The generator of the run's batches (``run.iterate`` makes it): the ``before`` section, the stages, every
    batch delivered, everything closed, the ``after`` section."""
    # Only `pipeline` is kept here, never its state: next_batch passes a weak proxy, so that the iterator its state
    # holds does not keep the pipeline (and the prefetch workers) alive once the user drops it.
    in_processes = args.in_processes
    # a rank's block of whole batches keeps the run's batch numbers: the seeds, I('c') and epochs of one process
    first = 0 if block is None else block[0]
    locks = OrderedLocks(first) if args.prefetch else None
    plan = _plan(pipeline, args, locks, ahead, checkpoints, events)
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
            progress = _started(stream, pipeline, args, checkpoints, events, signals,
                                total if block is None else block[1] - block[0], main)
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


def _plan(pipeline: Any, args: RunArgs, locks: OrderedLocks | None, ahead: bool,
          checkpoints: RunCheckpoints | None, events: TrainingRun | None) -> Any:
    """The run's compiled steps (``steps.compile_plan``), the stateful ones deferred to the caller's thread where
    the run needs them there."""
    in_processes = args.in_processes
    # A checkpoint is taken, and callbacks are called, between two batches: stateful actions run in the caller's
    # thread, as for gen_batch, so that no batch after a callback's stop reaches a model step.
    defer = not in_processes and ((args.prefetch > 0 and not ahead) or checkpoints is not None or events is not None)
    plan = compile_plan(pipeline.actions, getattr(pipeline.dataset, 'batch_class', None), locks, args.batch_size,
                        defer=defer)
    if events is not None and plan.rebatches:
        raise ValueError("Expected a pipeline without rebatch for a run with callbacks. Received: a rebatch "
                         "action, whose batches do not follow the epochs. Run without callbacks=, or rebatch in "
                         "the dataset instead.")
    return plan


def _started(stream: Any, pipeline: Any, args: RunArgs, checkpoints: RunCheckpoints | None,
             events: TrainingRun | None, signals: GracefulStop | None, shown: int | None, main: bool) -> Any:
    """The run started on its stages: a checkpoint's state restored into them, the callbacks told, and the progress
    bar (rank 0's only; ``shown`` batches: a rank's bar counts its own block) opened, or ``None``."""
    if checkpoints is not None:
        checkpoints.check(stream)
        checkpoints.events, checkpoints.signals = events, signals
        checkpoints.restore(stream)
    if events is not None:
        events.start()
    progress = _progress(args.bar if main else False, shown, pipeline.state.variables, checkpoints)
    if events is not None and progress is not None:
        events.write = progress.write           # the epoch summary above the bar, not through it
    return progress


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
