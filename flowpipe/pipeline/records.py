"""Frozen records that make up a pipeline definition.

A ``Pipeline`` is a tuple of records. ``ActionRecord`` is one action as the user wrote it; ``MaybeRecord``
wraps the actions of ``p @ prob``. Records are never changed after creation: composing pipelines builds new
tuples of the same records.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

__all__ = ['ActionRecord', 'MaybeRecord', 'Record', 'format_call']


def _freeze(kwargs: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(kwargs or {}))


@dataclass(frozen=True, eq=True)
class ActionRecord:
    """One action of a pipeline: a built-in or a batch action, with its arguments as declared.

    Attributes:
        name: the action's name (``'resize'``, ``'init_variable'``...).
        args: positional arguments, possibly holding named expressions.
        kwargs: keyword arguments, a read-only mapping.
        use_lock: run this action for one batch at a time, in batch order; ``None`` leaves the choice to
            the action's own default (``@action(use_lock=True)``).
    """
    name: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=_freeze)
    use_lock: bool | None = None

    def __post_init__(self):
        if not isinstance(self.kwargs, MappingProxyType):
            object.__setattr__(self, 'kwargs', _freeze(self.kwargs))
        object.__setattr__(self, 'args', tuple(self.args))

    __hash__ = None

    def __reduce__(self):
        return (type(self), (self.name, self.args, dict(self.kwargs), self.use_lock))

    def __repr__(self) -> str:
        extra = {} if self.use_lock is None else {'use_lock': self.use_lock}
        return format_call(self.name, self.args, {**self.kwargs, **extra})


@dataclass(frozen=True, eq=True)
class MaybeRecord:
    """The actions of ``pipeline @ prob``: applied to a batch with probability ``prob``.

    Attributes:
        actions: the wrapped records.
        prob: probability in ``[0, 1]`` of applying them, drawn from the batch's generator.
    """
    actions: tuple
    prob: float

    __hash__ = None

    def __repr__(self) -> str:
        inner = ', '.join(repr(record) for record in self.actions)
        return f"({inner}) @ {self.prob!r}"


Record = ActionRecord | MaybeRecord


def format_call(name: str, args: tuple, kwargs: Mapping[str, Any], limit: int = 60) -> str:
    """``name(arg, key=value)`` with each argument's repr shortened to ``limit`` characters."""
    def short(value: Any) -> str:
        lines = repr(value).split('\n')
        text = lines[0] if len(lines) == 1 else lines[0] + ' ...'
        return text if len(text) <= limit else text[:limit - 3] + '...'
    parts = [short(arg) for arg in args] + [f"{key}={short(value)}" for key, value in kwargs.items()]
    return f"{name}({', '.join(parts)})"
