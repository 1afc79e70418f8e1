"""Which actions run in batch order under prefetch, decided once per run from the state each action touches.

Every action of a stage gets an ``Access``: the shared state it reads and writes through named expressions
(variables ``V``, config ``C``), the model a model step reads or changes, whether it pulls batches of other
pipelines (``join``/``merge``) and its ``use_lock``. From these ``order_groups`` forms *ordered groups*:

- an action that writes shared state (a ``V``/``C`` target of ``save_to=``/``update``, ``train_model``'s
  model) or has ``use_lock=True`` is ordered;
- an action that reads what an ordered action of the stage writes joins that action's group (so
  ``update(V('n'), V('n') + 1)`` and a later ``print(V('n'))`` see exactly what a run without prefetch sees);
- ``use_lock=False`` takes an action out: its writes land in the order batches finish.

A group is one ordered lock, held by a batch from its first member to its last: batch *k* enters only after
batch *k - 1* has left (or finished, skipped, failed). A member that only writes (its value reads nothing the
group writes, e.g. ``update(V('out', mode='a'), F(heavy)(B.x))``) enters at the write itself, so the value is
still computed concurrently. ``join``/``merge`` pull in batch order under a lock of their own.

``deferred_from`` is the other use of the same analysis: ``gen_batch``/``next_batch`` run ahead only the actions
before the first *stateful* one (ordered, a model step, ``join``/``merge``, or any write).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..expr import Expression, assign
from ..expr.named import ConfigExpr, VariableExpr
from ..expr.refs import Reference, references
from ..pipeline.records import ActionRecord, MaybeRecord
from ..pipeline.registry import get_builtin

__all__ = ['Access', 'OrderedTarget', 'Ordering', 'access_of', 'default_use_lock', 'deferred_from', 'order_units',
           'written']


@dataclass(frozen=True)
class Access:
    """The shared state one action (a unit: an action with the ``join`` before it, or a ``p @ prob`` block) touches.

    Attributes:
        reads: references read by the arguments (and the model a model step uses).
        writes: references written: ``V``/``C`` assignment targets, the model ``train_model`` changes.
        lock: the effective ``use_lock``: ``True`` ordered as a whole, ``False`` never ordered, ``None`` ordered
            when it touches state an ordered action writes.
        model: a model step (``train_model``, ``predict_model``, ``save_model``).
        pulls: pulls batches of other pipelines (``join``/``merge``).
        gate: its writes are target writes only, so it may enter its group at the write.
    """
    reads: frozenset[Reference] = frozenset()
    writes: frozenset[Reference] = frozenset()
    lock: bool | None = None
    model: bool = False
    pulls: bool = False
    gate: bool = False

    @property
    def stateful(self) -> bool:
        """Whether running it for a batch changes anything outside the batch (or depends on such order)."""
        return bool(self.writes) or bool(self.lock) or self.model or self.pulls


@dataclass(frozen=True)
class Ordering:
    """How one unit is ordered: the group's lock ``key``, where it enters, whether it leaves the group."""
    key: int
    at_write: bool
    leave: bool


def default_use_lock(batch_class: type | None, name: str) -> bool:
    """The ``use_lock`` an ``@action`` declared for itself (``False`` when unknown)."""
    spec = getattr(getattr(batch_class, name, None), 'action', None)
    if isinstance(spec, dict):
        return bool(spec.get('use_lock', False))
    return bool(getattr(spec, 'use_lock', False))


def access_of(record: Any, batch_class: type | None) -> Access:
    """The ``Access`` of a record (``ActionRecord`` or ``MaybeRecord``)."""
    if isinstance(record, MaybeRecord):
        inner = [access_of(one, batch_class) for one in record.actions]
        inner = [one for one in inner if one.lock is not False]
        return Access(frozenset().union(*(one.reads for one in inner)),
                      frozenset().union(*(one.writes for one in inner)),
                      True if any(one.lock for one in inner) else None,
                      any(one.model for one in inner), any(one.pulls for one in inner))
    if record.name in ('join', 'merge'):
        return Access(lock=record.use_lock, pulls=True)
    spec = get_builtin(record.name)
    if spec is None:
        lock = record.use_lock
        if lock is None and default_use_lock(batch_class, record.name):
            lock = True
        return Access(references((record.args, dict(record.kwargs))), lock=lock)
    return _builtin_access(record, spec)


def _builtin_access(record: ActionRecord, spec: Any) -> Access:
    targets = [value for key, value in record.kwargs.items() if key in spec.keep]
    others = {key: value for key, value in record.kwargs.items() if key not in spec.keep}
    # A built-in that takes its arguments unevaluated (init_model: its config is read when the model is built)
    # reads nothing through them per batch.
    reads = set(references((record.args, others))) if spec.evaluate else set()
    writes = set(written(targets))
    gate = bool(writes) and record.use_lock is None and spec.model_access != 'write'
    if spec.model_access is not None:
        name = record.args[0] if record.args else record.kwargs.get('name')
        model = ('M', name if isinstance(name, str) else None)
        reads.add(model)
        if spec.model_access == 'write':
            writes.add(model)
    return Access(frozenset(reads), frozenset(writes), record.use_lock, spec.model_access is not None, gate=gate)


def written(target: Any) -> list[Reference]:
    """The shared references an assignment target writes (batch components are the batch's own)."""
    if isinstance(target, (list, tuple)):
        return [ref for item in target for ref in written(item)]
    if isinstance(target, VariableExpr):
        name = target.expr_name
        return [('V', name if isinstance(name, str) else None)]
    if isinstance(target, ConfigExpr):
        return [('C', None)]
    return []


def _overlap(first: frozenset, second: frozenset) -> bool:
    for kind, name in first:
        for other_kind, other_name in second:
            if kind == other_kind and (name is None or other_name is None or name == other_name):
                return True
    return False


def _conflict(first: Access, second: Access) -> bool:
    if first.lock is False or second.lock is False:
        return False
    return _overlap(first.writes, second.writes | second.reads) or _overlap(first.reads, second.writes)


def order_units(accesses: list[Access], keys: Iterator[int]) -> list[Ordering | None]:
    """The ``Ordering`` of each unit (``None``: runs freely); each group takes its lock key from ``keys``."""
    count = len(accesses)
    parent = list(range(count))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    member = [one.lock is True or (one.lock is None and bool(one.writes)) for one in accesses]
    for i in range(count):
        for j in range(i + 1, count):
            if _conflict(accesses[i], accesses[j]):     # one of them writes: it is a member already
                member[i] = member[j] = True
                parent[root(j)] = root(i)
    return _orderings(accesses, [root(i) if member[i] else None for i in range(count)], keys)


def _orderings(accesses: list[Access], groups: list[int | None], keys: Iterator[int]) -> list[Ordering | None]:
    locks = {group: next(keys) for group in dict.fromkeys(g for g in groups if g is not None)}
    last = {group: position for position, group in enumerate(groups) if group is not None}
    written = {group: frozenset().union(*(accesses[i].writes for i, g in enumerate(groups) if g == group))
               for group in locks}
    orderings: list[Ordering | None] = []
    for position, (access, group) in enumerate(zip(accesses, groups)):
        if group is None:
            orderings.append(None)
            continue
        at_write = access.gate and not _overlap(access.reads, written[group])
        orderings.append(Ordering(locks[group], at_write, last[group] == position))
    return orderings


def deferred_from(accesses: list[Access]) -> int:
    """Position of the first unit that must not run ahead of the caller (``len(accesses)`` when none)."""
    orderings = order_units(accesses, itertools.count())
    for position, (access, ordering) in enumerate(zip(accesses, orderings)):
        if access.stateful or ordering is not None:
            return position
    return len(accesses)


class OrderedTarget(Expression):
    """An assignment target whose writes wait for the batch's turn in an ordered group (entered at the write)."""
    __slots__ = ('_target', '_locks', '_key')

    def __init__(self, target: Any, locks: Any, key: int):
        self._target, self._locks, self._key = target, locks, key

    def get(self, ctx: Any) -> Any:
        raise TypeError(f"Expected {self._target!r} to be written, not read: it is an assignment target.")

    def set(self, value: Any, ctx: Any, mode: str | None = None) -> None:
        self._locks.enter(self._key, ctx.iteration)
        assign(self._target, value, ctx, mode)

    def __repr__(self) -> str:
        return repr(self._target)
