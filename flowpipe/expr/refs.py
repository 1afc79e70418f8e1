"""``references(obj)``: which shared state the named expressions inside ``obj`` point at.

The execution engine reads this once per run to decide which actions must run in batch order under prefetch:
an action that reads a variable another action writes is ordered with it. A reference is ``(kind, name)`` with
kind ``'V'`` (pipeline variable), ``'C'`` (pipeline config) or ``'M'`` (model); ``name`` is ``None`` when it is
not known before a batch is processed (``V(C('name'))``) or means the whole store (``C()``). Config references are
always ``('C', None)``: config writes are rare, so any of them is taken to touch every option.
"""
from __future__ import annotations

from typing import Any

from .base import Expression
from .named import ConfigExpr, ModelExpr, NamedExpr, VariableExpr
from .roots import Root

__all__ = ['Reference', 'references']

Reference = tuple[str, Any]

_KINDS = ((VariableExpr, 'V'), (ConfigExpr, 'C'), (ModelExpr, 'M'))


def references(obj: Any) -> frozenset[Reference]:
    """Every ``(kind, name)`` that the named expressions in ``obj`` read (containers and expressions walked)."""
    found: set[Reference] = set()
    _walk(obj, found, set())
    return frozenset(found)


def _walk(obj: Any, found: set, seen: set) -> None:
    if id(obj) in seen:
        return
    if isinstance(obj, Expression):
        seen.add(id(obj))
        _walk_expression(obj, found, seen)
    elif isinstance(obj, dict):
        seen.add(id(obj))
        for key, value in obj.items():
            _walk(key, found, seen)
            _walk(value, found, seen)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        seen.add(id(obj))
        for item in obj:
            _walk(item, found, seen)


def _walk_expression(expr: Expression, found: set, seen: set) -> None:
    if isinstance(expr, Root):
        if repr(expr) == 'C':        # bare C is C(): the whole config
            found.add(('C', None))
        return
    if isinstance(expr, NamedExpr):
        kind = next((letter for klass, letter in _KINDS if isinstance(expr, klass)), None)
        name = expr.expr_name
        if kind is not None:
            found.add((kind, None if kind == 'C' or not isinstance(name, str) else name))
    for klass in type(expr).__mro__:
        for slot in getattr(klass, '__slots__', ()):
            value = getattr(expr, slot, None)
            if isinstance(value, (Expression, dict, list, tuple, set, frozenset)):
                _walk(value, found, seen)
