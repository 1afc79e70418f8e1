"""Executable steps: the records of a pipeline turned into small callables, once per run.

``compile_plan`` walks the records and decides everything that does not change from batch to batch: which
function to call, whether the arguments hold named expressions (constant arguments are never walked again),
whether the step takes an ordered lock. Running a step is then one call: ``step(ctx)`` updates ``ctx.batch``.
``rebatch`` splits the plan into stages; ``join`` wraps the action after it; ``merge`` is a step of its own.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ..expr import contains_expressions, evaluate
from ..pipeline.names import batch_action_names, unknown_action
from ..pipeline.records import ActionRecord, MaybeRecord
from ..pipeline.registry import get_builtin
from .runner import run_steps

__all__ = ['Plan', 'Step', 'compile_plan', 'default_use_lock', 'pull_batch']


class Step:
    """One action, ready to run on a batch's context."""
    __slots__ = ('name', 'label')

    def __call__(self, ctx: Any) -> None:
        raise NotImplementedError

    def call_with(self, ctx: Any, lead: tuple) -> None:
        """Run with the batches of a preceding ``join`` as extra leading arguments."""
        raise ValueError(f"Expected an action after join() that accepts the joined batches. Received: {self.label}")


class BatchStep(Step):
    """A batch action: ``batch.<name>(*args, **kwargs)``; a returned batch replaces the current one."""
    __slots__ = ('args', 'kwargs', 'dynamic', 'checked')

    def __init__(self, record: ActionRecord):
        self.name, self.label = record.name, repr(record)
        self.args, self.kwargs = record.args, dict(record.kwargs)
        self.dynamic = contains_expressions(self.args) or contains_expressions(self.kwargs)
        self.checked: type | None = None

    def __call__(self, ctx: Any) -> None:
        self.call_with(ctx, ())

    def call_with(self, ctx: Any, lead: tuple) -> None:
        args, kwargs = self.args, self.kwargs
        if self.dynamic:
            args, kwargs = evaluate(args, ctx), evaluate(kwargs, ctx)
        batch = ctx.batch
        if type(batch) is not self.checked:
            self._check(type(batch))
        result = getattr(batch, self.name)(*lead, *args, **kwargs)
        if result is not None:
            ctx.batch = result

    def _check(self, batch_class: type) -> None:
        # Pipelines declared without a dataset meet their batch class here, on the first batch.
        if self.name not in batch_action_names(batch_class):
            raise unknown_action(self.name, batch_class)
        self.checked = batch_class


class BuiltinStep(Step):
    """A built-in action: ``func(ctx, *args, **kwargs)``; a returned batch replaces the current one."""
    __slots__ = ('func', 'args', 'kwargs', 'kept', 'dynamic', 'join_at')

    def __init__(self, record: ActionRecord):
        spec = get_builtin(record.name)
        self.name, self.label, self.func, self.join_at = record.name, repr(record), spec.func, spec.join_at
        kept = spec.keep if spec.evaluate else tuple(record.kwargs)
        self.kept = {key: value for key, value in record.kwargs.items() if key in kept}
        self.kwargs = {key: value for key, value in record.kwargs.items() if key not in kept}
        self.args = record.args
        self.dynamic = spec.evaluate and (contains_expressions(self.args) or contains_expressions(self.kwargs))
        if not self.dynamic:
            self.kwargs, self.kept = {**self.kwargs, **self.kept}, {}

    def __call__(self, ctx: Any) -> None:
        args, kwargs = self.args, self.kwargs
        if self.dynamic:
            args, kwargs = evaluate(args, ctx), {**evaluate(kwargs, ctx), **self.kept}
        result = self.func(ctx, *args, **kwargs)
        if result is not None:
            ctx.batch = result

    def call_with(self, ctx: Any, lead: tuple) -> None:
        args, kwargs = self.args, self.kwargs
        if self.dynamic:
            args, kwargs = evaluate(args, ctx), {**evaluate(kwargs, ctx), **self.kept}
        args = (*args[:self.join_at], *lead, *args[self.join_at:])
        result = self.func(ctx, *args, **kwargs)
        if result is not None:
            ctx.batch = result


class LockedStep(Step):
    """Runs ``inner`` for one batch at a time, in batch order (``use_lock=True``)."""
    __slots__ = ('inner', 'locks', 'key')

    def __init__(self, inner: Step, locks: Any, key: int):
        self.name, self.label, self.inner, self.locks, self.key = inner.name, inner.label, inner, locks, key

    def __call__(self, ctx: Any) -> None:
        self.locks.acquire(self.key, ctx.iteration)
        try:
            self.inner(ctx)
        finally:
            self.locks.release(self.key, ctx.iteration)

    def call_with(self, ctx: Any, lead: tuple) -> None:
        self.locks.acquire(self.key, ctx.iteration)
        try:
            self.inner.call_with(ctx, lead)
        finally:
            self.locks.release(self.key, ctx.iteration)


class MaybeStep(Step):
    """The steps of ``pipeline @ prob``: run with probability ``prob``, drawn from the batch's generator."""
    __slots__ = ('steps', 'prob')

    def __init__(self, steps: tuple, prob: float, label: str):
        self.name, self.label, self.steps, self.prob = '@', label, steps, prob

    def __call__(self, ctx: Any) -> None:
        if ctx.random.random() < self.prob:
            run_steps(self.steps, ctx)


class JoinStep(Step):
    """``join(*pipelines)`` and the action after it: that action gets the joined batches first."""
    __slots__ = ('pipelines', 'inner', 'locks', 'key', 'pull_size')

    def __init__(self, record: ActionRecord, inner: Step, locks: Any, key: int, pull_size: int):
        self.name, self.label = inner.name, f"{record!r}.{inner.label}"
        self.pipelines, self.inner, self.locks, self.key, self.pull_size = record.args, inner, locks, key, pull_size

    def __call__(self, ctx: Any) -> None:
        lead = _pull_in_order(self.pipelines, self.pull_size, self.locks, self.key, ctx.iteration)
        self.inner.call_with(ctx, lead)


class MergeStep(Step):
    """``merge(*pipelines)``: the batch and the next batch of each pipeline become one batch."""
    __slots__ = ('pipelines', 'locks', 'key', 'pull_size')

    def __init__(self, record: ActionRecord, locks: Any, key: int, pull_size: int):
        self.name, self.label = record.name, repr(record)
        self.pipelines, self.locks, self.key, self.pull_size = record.args, locks, key, pull_size

    def __call__(self, ctx: Any) -> None:
        others = _pull_in_order(self.pipelines, self.pull_size, self.locks, self.key, ctx.iteration)
        batch = ctx.batch
        merged, _ = type(batch).merge([batch, *others], None)
        ctx.batch = merged


def pull_batch(pipeline: Any, batch_size: int) -> Any:
    """The next batch of a joined or merged pipeline: its own lazy run arguments, else ``batch_size``."""
    if pipeline.run_args is not None and pipeline.run_args.batch_size is not None:
        return pipeline.next_batch()
    return pipeline.next_batch(batch_size)


def _pull_in_order(pipelines: tuple, batch_size: int, locks: Any, key: int, seq: int) -> tuple:
    # Batches are pulled in batch order, so prefetch does not change which batch meets which.
    if locks is None:
        return tuple(pull_batch(pipeline, batch_size) for pipeline in pipelines)
    locks.acquire(key, seq)
    try:
        return tuple(pull_batch(pipeline, batch_size) for pipeline in pipelines)
    finally:
        locks.release(key, seq)


@dataclass
class Plan:
    """The compiled pipeline: one tuple of steps per stage; a stage after the first starts at a ``rebatch``.

    Attributes:
        stages: steps of each stage.
        rebatches: the ``rebatch`` record's options before each stage after the first.
        locked: whether any step of the first stage takes an ordered lock.
    """
    stages: list[tuple[Step, ...]] = field(default_factory=list)
    rebatches: list[dict] = field(default_factory=list)
    locked: bool = False


def compile_plan(records: tuple, batch_class: type | None, locks: Any, pull_size: int) -> Plan:
    """Compile the main records into stages of steps.

    Args:
        records: the pipeline's main records.
        batch_class: the dataset's batch class (for ``@action(use_lock=True)`` defaults), if known.
        locks: the run's ``OrderedLocks`` for the first stage (prefetched), or ``None`` (no locking at all).
        pull_size: batch size for pulling batches of joined or merged pipelines without lazy run arguments.
    """
    plan, keys, current = Plan(), itertools.count(), []
    for record in records:
        if isinstance(record, ActionRecord) and record.name == 'rebatch':
            plan.stages.append(tuple(current))
            plan.rebatches.append(dict(record.kwargs))
            current = []
            continue
        current.append(record)
    plan.stages.append(tuple(current))
    # Only the first stage is prefetched; later stages run in the caller's thread, in order, without locks.
    plan.stages = [_compile_steps(stage, batch_class, locks if i == 0 else None, pull_size, keys, plan)
                   for i, stage in enumerate(plan.stages)]
    return plan


def _compile_steps(records: tuple, batch_class: type | None, locks: Any, pull_size: int,
                   keys: itertools.count, plan: Plan) -> tuple[Step, ...]:
    steps: list[Step] = []
    joining: ActionRecord | None = None
    for record in records:
        if isinstance(record, MaybeRecord):
            inner = _compile_steps(record.actions, batch_class, locks, pull_size, keys, plan)
            step: Step = MaybeStep(inner, record.prob, repr(record))
        elif record.name == 'rebatch':
            raise ValueError(f"Expected rebatch() in the main chain. Received: it inside {record!r}; "
                             "'@' and sections cannot change the batch size.")
        elif record.name == 'join':
            if joining is not None:
                joining = ActionRecord('join', joining.args + record.args)
            else:
                joining = record
            continue
        elif record.name == 'merge':
            step = MergeStep(record, locks, next(keys), pull_size)
            plan.locked |= locks is not None
        else:
            step = _action_step(record, batch_class, locks, keys, plan)
            if step is None:
                continue
        if joining is not None:
            step = JoinStep(joining, step, locks, next(keys), pull_size)
            plan.locked |= locks is not None
            joining = None
        steps.append(step)
    if joining is not None:
        raise ValueError(f"Expected an action after {joining!r} to receive the joined batches. Received: "
                         "nothing after it. Add the action that takes them, e.g. .call(func, B()).")
    return tuple(steps)


def _action_step(record: ActionRecord, batch_class: type | None, locks: Any, keys: itertools.count,
                 plan: Plan) -> Step | None:
    spec = get_builtin(record.name)
    if spec is not None and not spec.per_batch:
        return None
    step: Step = BuiltinStep(record) if spec is not None else BatchStep(record)
    use_lock = record.use_lock
    if use_lock is None:
        use_lock = spec is None and default_use_lock(batch_class, record.name)
    if use_lock and locks is not None:
        plan.locked = True
        return LockedStep(step, locks, next(keys))
    return step


def default_use_lock(batch_class: type | None, name: str) -> bool:
    """The ``use_lock`` an ``@action`` declared for itself (``False`` when unknown)."""
    spec = getattr(getattr(batch_class, name, None), 'action', None)
    if isinstance(spec, dict):
        return bool(spec.get('use_lock', False))
    return bool(getattr(spec, 'use_lock', False))

