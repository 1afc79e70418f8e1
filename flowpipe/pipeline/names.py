"""Resolving action names: built-ins first, then the batch class's actions, else a helpful error."""
from __future__ import annotations

import difflib
from typing import Any

from ..errors import UnknownActionError
from .registry import builtin_names, get_builtin

__all__ = ['any_batch_action', 'batch_action_names', 'check_action', 'check_dataset', 'unknown_action']


def batch_action_names(batch_class: type) -> tuple[str, ...]:
    """The names of ``batch_class``'s actions (``Batch.action_names()``), or ``()`` if it lists none."""
    names = getattr(batch_class, 'action_names', None)
    return tuple(names()) if callable(names) else ()


def any_batch_action(name: str, batch_class: type | None) -> bool:
    """Whether ``name`` is an action of ``batch_class``, or, when it is not known yet, of any ``Batch`` class."""
    if batch_class is not None:
        return name in batch_action_names(batch_class)
    from ..batch import Batch
    pending, seen = [Batch], set()
    while pending:
        klass = pending.pop()
        if klass not in seen:
            seen.add(klass)
            if name in batch_action_names(klass):
                return True
            pending.extend(klass.__subclasses__())
    return False


def check_action(name: str, batch_class: type | None, also: tuple[str, ...] = ()) -> None:
    """Raise ``UnknownActionError`` unless ``name`` is a built-in or an action of ``batch_class``.

    With ``batch_class=None`` (no dataset bound yet) only built-ins can be checked; other names are accepted
    here and checked on the first batch. ``also`` are more names to suggest (the pipeline's own methods).
    """
    if get_builtin(name) is not None or batch_class is None:
        return
    if name not in batch_action_names(batch_class):
        raise unknown_action(name, batch_class, also)


def unknown_action(name: str, batch_class: type | None, also: tuple[str, ...] = ()) -> UnknownActionError:
    """The error for an action ``name`` that neither the built-ins nor ``batch_class`` define.

    Close actions and built-ins are suggested first; close names among ``also`` (the pipeline's own methods)
    only fill the remaining places, and are called pipeline methods, since they are not actions.
    """
    actions = builtin_names() + (batch_action_names(batch_class) if batch_class is not None else ())
    close = difflib.get_close_matches(name, actions, n=3, cutoff=0.6)
    methods = [method for method in difflib.get_close_matches(name, also, n=3, cutoff=0.6) if method not in close]
    choices = [' or '.join(map(repr, close))] if close else []
    if methods[:3 - len(close)]:
        kept = methods[:3 - len(close)]
        kind = 'the pipeline method' if len(kept) == 1 else 'the pipeline methods'
        choices.append(f"{kind} {' or '.join(map(repr, kept))}")
    owner = f"an action of {batch_class.__name__}" if batch_class is not None else "a batch action"
    hint = f"Did you mean {' or '.join(choices)}? " if choices else ''
    return UnknownActionError(f"Unknown action {name!r}: neither a built-in nor {owner}. {hint}"
                              "Define it with @action on the batch class, or use .call(func).")


def check_dataset(dataset: Any) -> None:
    """Raise ``TypeError`` unless ``dataset`` looks like a dataset (has ``index`` and ``create_batch``)."""
    from ..expr import Expression
    if isinstance(dataset, Expression):
        raise TypeError(f"Expected a dataset. Received: {dataset!r}, a named expression; a pipeline binds one dataset "
                        "when it is made. Bind the one you mean, e.g. template << dataset.cv(0).train, once per fold "
                        "(see docs/porting.md#datasets-chosen-by-expressions)")
    if not hasattr(dataset, 'index') or not callable(getattr(dataset, 'create_batch', None)):
        raise TypeError(f"Expected a dataset with .index and .create_batch() (a flowpipe Dataset). "
                        f"Received: {dataset!r}")
