"""Executable steps: the records of a pipeline turned into small callables, once per run.

``compile_plan`` walks the records and decides everything that does not change from batch to batch: which
function to call, whether the arguments hold named expressions (constant arguments are never walked again),
whether the step takes an ordered lock. Running a step is then one call: ``step(ctx)`` updates ``ctx.batch``.
``rebatch`` splits the plan into stages; ``join`` wraps the action after it; ``merge`` is a step of its own.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..expr import contains_expressions, evaluate
from ..pipeline.names import batch_action_names, unknown_action
from ..pipeline.records import ActionRecord, MaybeRecord
from ..pipeline.registry import get_builtin
from .ordering import (Access, OrderedTarget, Ordering, access_of, default_use_lock, deferred_from, order_units,
                       written)
from .runner import run_steps

__all__ = ['OrderedStep', 'Plan', 'Step', 'compile_plan', 'default_use_lock', 'pull_batch']


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
    __slots__ = ('func', 'args', 'kwargs', 'kept', 'dynamic', 'join_at', 'targets')

    def __init__(self, record: ActionRecord):
        spec = get_builtin(record.name)
        self.name, self.label, self.func, self.join_at = record.name, repr(record), spec.func, spec.join_at
        self.targets = spec.keep
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

    def gate_writes(self, wrap: Callable[[Any], Any]) -> None:
        """Replace each assignment target that writes shared state by ``wrap(target)``."""
        for store in (self.kept, self.kwargs):
            for name in self.targets:
                if name in store and written(store[name]):
                    store[name] = wrap(store[name])

    def call_with(self, ctx: Any, lead: tuple) -> None:
        args, kwargs = self.args, self.kwargs
        if self.dynamic:
            args, kwargs = evaluate(args, ctx), {**evaluate(kwargs, ctx), **self.kept}
        args = (*args[:self.join_at], *lead, *args[self.join_at:])
        result = self.func(ctx, *args, **kwargs)
        if result is not None:
            ctx.batch = result


class OrderedStep(Step):
    """A member of an ordered group (see ``ordering``): enters the group's lock before ``inner`` unless it enters
    at its write, and leaves the group after ``inner`` when it is the group's last member."""
    __slots__ = ('inner', 'locks', 'key', 'enter', 'leave')

    def __init__(self, inner: Step, locks: Any, key: int, enter: bool, leave: bool):
        self.name, self.label, self.inner, self.locks, self.key = inner.name, inner.label, inner, locks, key
        self.enter, self.leave = enter, leave

    def __call__(self, ctx: Any) -> None:
        self.call_with(ctx, None)

    def call_with(self, ctx: Any, lead: tuple | None) -> None:
        # On an error or SkipBatch the runner's `locks.running(seq)` releases what the batch holds.
        if self.enter:
            self.locks.enter(self.key, ctx.iteration)
        if lead is None:
            self.inner(ctx)
        else:
            self.inner.call_with(ctx, lead)
        if self.leave:
            self.locks.leave(self.key, ctx.iteration)


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
    """``merge(*pipelines)``: the batch and the next batch of each pipeline become one batch (``fn(batches)`` or
    the batch class's ``merge`` with the record's ``components``/``batch_class``)."""
    __slots__ = ('pipelines', 'locks', 'key', 'pull_size', 'fn', 'options')

    def __init__(self, record: ActionRecord, locks: Any, key: int, pull_size: int):
        self.name, self.label = record.name, repr(record)
        self.pipelines, self.locks, self.key, self.pull_size = record.args, locks, key, pull_size
        self.fn, self.options = record.kwargs.get('fn'), record.kwargs.get('options', {})

    def __call__(self, ctx: Any) -> None:
        others = _pull_in_order(self.pipelines, self.pull_size, self.locks, self.key, ctx.iteration)
        batch = ctx.batch
        if self.fn is not None:
            merged, _ = self.fn([batch, *others])
        else:
            merged, _ = type(batch).merge([batch, *others], None, **self.options)
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
        deferred: with ``defer=True``, the first stage's steps from its first stateful one on, which run in the
            caller's thread when the batch is asked for (``stages[0]`` holds the steps before them).
    """
    stages: list[tuple[Step, ...]] = field(default_factory=list)
    rebatches: list[dict] = field(default_factory=list)
    locked: bool = False
    deferred: tuple[Step, ...] = ()


@dataclass(frozen=True)
class _Unit:
    """One step to be: an action (or ``p @ prob`` block) with the batches of the ``join`` before it, if any."""
    record: Any
    joining: ActionRecord | None = None

    def access(self, batch_class: type | None) -> Access:
        access = access_of(self.record, batch_class)
        return access if self.joining is None else replace(access, pulls=True)


def compile_plan(records: tuple, batch_class: type | None, locks: Any, pull_size: int,
                 defer: bool = False) -> Plan:
    """Compile the main records into stages of steps.

    Args:
        records: the pipeline's main records.
        batch_class: the dataset's batch class (for ``@action(use_lock=True)`` defaults), if known.
        locks: the run's ``OrderedLocks`` for the first stage (prefetched), or ``None`` (no ordering at all).
        pull_size: batch size for pulling batches of joined or merged pipelines without lazy run arguments.
        defer: split the first stage at its first stateful step (``gen_batch``/``next_batch``): the steps
            before it may run ahead in workers, the rest (``Plan.deferred``) runs when the caller asks.
    """
    plan, keys, stages, current = Plan(), itertools.count(), [], []
    for record in records:
        if isinstance(record, ActionRecord) and record.name == 'rebatch':
            stages.append(_units(current))
            plan.rebatches.append(dict(record.kwargs))
            current = []
            continue
        current.append(record)
    stages.append(_units(current))
    compiler = _Compiler(batch_class, pull_size, keys, plan)
    first = stages[0]
    if defer:
        cut = deferred_from([unit.access(batch_class) for unit in first])
        first, plan.deferred = first[:cut], compiler.steps(first[cut:], None)
    # Only the first stage is prefetched; later stages run in the caller's thread, in order, without locks.
    plan.stages = [compiler.steps(first, None if defer else locks)]
    plan.stages += [compiler.steps(stage, None) for stage in stages[1:]]
    return plan


def _units(records: tuple | list) -> list[_Unit]:
    units, joining = [], None
    for record in records:
        if isinstance(record, ActionRecord) and record.name == 'rebatch':
            raise ValueError(f"Expected rebatch() in the main chain. Received: it inside {record!r}; "
                             "'@' and sections cannot change the batch size.")
        if isinstance(record, ActionRecord) and record.name == 'join':
            joining = record if joining is None else ActionRecord('join', joining.args + record.args)
            continue
        spec = get_builtin(record.name) if isinstance(record, ActionRecord) else None
        if spec is not None and not spec.per_batch:
            continue
        units.append(_Unit(record, joining))
        joining = None
    if joining is not None:
        raise ValueError(f"Expected an action after {joining!r} to receive the joined batches. Received: "
                         "nothing after it. Add the action that takes them, e.g. .call(func, B()).")
    return units


class _Compiler:
    """Turns units into steps: ordered groups (with locks), ``join``/``merge`` pulls, ``p @ prob`` blocks."""

    def __init__(self, batch_class: type | None, pull_size: int, keys: Iterator[int], plan: Plan):
        self.batch_class, self.pull_size, self.keys, self.plan = batch_class, pull_size, keys, plan

    def steps(self, units: list[_Unit], locks: Any, order: bool = True) -> tuple[Step, ...]:
        orderings: list = [None] * len(units)
        if locks is not None and order:
            orderings = order_units([unit.access(self.batch_class) for unit in units], self.keys)
        return tuple(self._step(unit, ordering, locks) for unit, ordering in zip(units, orderings))

    def _step(self, unit: _Unit, ordering: Ordering | None, locks: Any) -> Step:
        record = unit.record
        if isinstance(record, MaybeRecord):
            # The block is ordered as a whole; its own steps pull (join/merge) in order but take no group lock.
            step: Step = MaybeStep(self.steps(_units(record.actions), locks, order=False), record.prob, repr(record))
        elif record.name == 'merge':
            step = MergeStep(record, locks, next(self.keys), self.pull_size)
        else:
            step = BuiltinStep(record) if get_builtin(record.name) is not None else BatchStep(record)
        if ordering is not None and ordering.at_write:
            step.gate_writes(lambda target, key=ordering.key: OrderedTarget(target, locks, key))
        if unit.joining is not None:
            step = JoinStep(unit.joining, step, locks, next(self.keys), self.pull_size)
        self.plan.locked |= locks is not None and (ordering is not None or unit.joining is not None
                                                   or isinstance(step, MergeStep))
        if ordering is not None and (not ordering.at_write or ordering.leave):
            step = OrderedStep(step, locks, ordering.key, enter=not ordering.at_write, leave=ordering.leave)
        return step
