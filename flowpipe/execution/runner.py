"""The action runner: processes one batch through the compiled steps of one stage.

``BatchRunner.process(seq, index)`` creates the batch from its sub-index, gives it the seed of batch ``seq``
from the run's seed tree, builds the ``Context`` and runs every step. It is what the prefetcher calls, in the
caller's thread (``prefetch=0``) or in a worker. When ``gen_batch``/``next_batch`` keep the stateful steps for
the caller, the prefetcher calls ``start`` instead (it returns the batch's ``Context``) and ``DeferredStage``
runs the rest with ``resume`` on that same context, in the caller's thread, when the batch is asked for.
"""
from __future__ import annotations

import cProfile
import pstats
import threading
import time
from typing import Any, Callable

from ..errors import SkipBatch, StopPipeline, add_note
from ..expr.context import Context
from .seeds import batch_seed

__all__ = ['BatchRunner', 'NOTE_PREFIX', 'ProfiledStep', 'run_steps']

NOTE_PREFIX = 'flowpipe: raised in action'
_DETAILED = threading.Lock()


def run_steps(steps: tuple, ctx: Any, first: int = 0) -> None:
    """Run ``steps`` on ``ctx`` in order; an error gets a note naming the action (numbered from ``first``) and
    the batch."""
    for position, step in enumerate(steps, first):
        try:
            step(ctx)
        except (SkipBatch, StopPipeline):
            raise
        except Exception as exc:
            _note(exc, position, step, ctx)
            raise


class ProfiledStep:
    """A step that records its time in a profiler under a name fixed for the run (``profile=True``)."""
    __slots__ = ('inner', 'name', 'label', 'profiler', 'key')

    def __init__(self, inner: Any, profiler: Any, key: str):
        self.inner, self.name, self.label, self.profiler, self.key = inner, inner.name, inner.label, profiler, key

    def __call__(self, ctx: Any) -> None:
        # One cProfile at a time: from Python 3.12 on, two cannot be active at once even in two threads. The lock is
        # never waited for: a profiled action may wait for an earlier batch's ordered write, whose actions must go
        # on. An action that starts while another is profiled (or nested in one: a joined pipeline's) is only timed.
        if self.profiler.detailed and _DETAILED.acquire(blocking=False):
            try:
                self._detailed(ctx)
            finally:
                _DETAILED.release()
            return
        start = time.perf_counter()
        try:
            self.inner(ctx)
        finally:
            self.profiler.record(self.key, ctx.iteration, time.perf_counter() - start)

    def _detailed(self, ctx: Any) -> None:
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        try:
            self.inner(ctx)
        finally:
            profile.disable()
            self.profiler.record(self.key, ctx.iteration, time.perf_counter() - start)
            self.profiler.record_calls(self.key, ctx.iteration, pstats.Stats(profile))


def _note(exc: BaseException, position: int, step: Any, ctx: Any) -> None:
    notes = getattr(exc, '__notes__', ())
    if not any(note.startswith(NOTE_PREFIX) for note in notes):
        where = f"batch {ctx.iteration}" if ctx.batch is not None else "a before/after section"
        add_note(exc, f"{NOTE_PREFIX} #{position} {step.label} of {where}")


class BatchRunner:
    """Processes batches of one stage of a run.

    Args:
        pipeline: the running pipeline (its dataset, config and state are read once, here).
        steps: the stage's compiled steps.
        root: the run's root seed (int entropy).
        seed_given: whether the user gave the root seed (else the run drew it).
        stage: the stage number (0 before any ``rebatch``); batch ``seq`` of stage ``s`` gets spawn key
            ``(1 + s, seq)``.
        total: number of batches the stage will produce, or ``None``.
        locks: ``OrderedLocks`` when a step takes one, else ``None``.
        profiler: a ``Profiler`` for ``profile=True``, else ``None``.
        first: the number of the stage's first step in the whole run, for the profiler's action names
            (``'3: resize'``), so that steps of different stages never share a name.
        clock: the run's ``EpochClock`` for a first-stage runner (``I('epoch')``, ``Context.epoch_items``), else
            ``None``.
        on_logs: in a first-stage runner of a run with callbacks, what hears each batch's logs
            (``Context.logs``) once its deferred steps are done (``resume``); else ``None``.
    """

    def __init__(self, pipeline: Any, steps: tuple, root: int, stage: int = 0, total: int | None = None,
                 locks: Any = None, profiler: Any = None, first: int = 0, seed_given: bool = True,
                 clock: Any = None, on_logs: Callable[[dict], None] | None = None):
        self.pipeline, self.steps, self.root, self.stage = pipeline, steps, root, stage
        self.seed_given = seed_given
        self.dataset, self.config, state = pipeline.dataset, pipeline.config, pipeline.state
        self.variables, self.models = state.variables, state.models
        self.total, self.locks, self.profiler, self.first, self.clock = total, locks, profiler, first, clock
        self.epoch_items = None if clock is None else clock.epoch_items
        self.on_logs = on_logs
        if profiler is not None:
            self.steps = tuple(ProfiledStep(step, profiler, f"{first + position}: {step.name}")
                               for position, step in enumerate(steps))

    def process(self, seq: int, index: Any) -> Any:
        """Create batch ``seq`` from ``index`` and run the steps on it; returns the processed batch."""
        return self.apply(seq, self.dataset.create_batch(index))

    def apply(self, seq: int, batch: Any) -> Any:
        """Run the steps on ``batch`` as batch number ``seq`` of the stage; returns the processed batch."""
        return self._run(seq, batch).batch

    def start(self, seq: int, index: Any) -> Context:
        """``process``, returning the batch's ``Context`` for ``resume`` to carry on with."""
        return self._run(seq, self.dataset.create_batch(index))

    def resume(self, ctx: Context) -> Any:
        """Run the steps on a context that another runner of the stage ``start``-ed; returns the batch. The
        batch's logs go to ``on_logs``, also when a step raised (a batch dropped by ``SkipBatch`` may have
        trained)."""
        try:
            run_steps(self.steps, ctx, self.first)
        finally:
            if self.on_logs is not None and ctx.logs:
                self.on_logs(ctx.logs)
        return ctx.batch

    def _run(self, seq: int, batch: Any) -> Context:
        seed = batch_seed(self.root, self.stage, seq, self.seed_given)
        batch.seed = seed
        ctx = Context(batch, self.dataset, self.config, self.variables, self.models, seq, self.total, seed,
                      self.pipeline, self.epoch_items,
                      epoch=None if self.clock is None else self.clock.epoch_of(seq),
                      logs=None if self.on_logs is None else {})
        if self.locks is None:
            run_steps(self.steps, ctx, self.first)
        else:
            with self.locks.running(seq):
                run_steps(self.steps, ctx, self.first)
        return ctx

    def section_context(self) -> Context:
        """A context without a batch, for the ``before``/``after`` sections."""
        return Context(None, self.dataset, self.config, self.variables, self.models, 0, self.total, None,
                       self.pipeline)
