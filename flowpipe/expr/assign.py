"""``assign(target, value, ctx)``: write a value through assignable expressions (``save_to=`` of actions)."""
from __future__ import annotations

from typing import Any

from .base import Expression

__all__ = ['assign']


def assign(target: Any, value: Any, ctx: Any, mode: str | None = None) -> None:
    """Write ``value`` through ``target`` in ``ctx``.

    Args:
        target: an assignable expression (``B('x')``, ``V('x')``, ``C('x')``), a list or tuple of them (then
            ``value`` must hold one value per target), or ``None`` to discard the value.
        value: what to write.
        ctx: the batch's ``Context``.
        mode: ``'w'``, ``'a'``, ``'e'`` or ``'u'``; ``None`` uses each target's own mode (``'w'`` unless given).
    """
    if target is None:
        return
    if isinstance(target, Expression):
        target.set(value, ctx, mode)
        return
    if isinstance(target, (list, tuple)):
        try:
            n_values = len(value)
        except TypeError:
            n_values = None
        if n_values != len(target):
            raise ValueError(f"Expected one value per target for save_to={target!r} ({len(target)} values). "
                             f"Received: {type(value).__name__} {value!r}. Give as many targets as values.")
        for one_target, one_value in zip(target, value):
            assign(one_target, one_value, ctx, mode)
        return
    raise TypeError(f"Expected an assignable expression (B('name'), V('name'), C('key')) or a list of them as "
                    f"a target. Received: {type(target).__name__} {target!r}. Use save_to=V('name') for example.")
