"""``L('comp')``: a batch component read and written item by item (batchflow's ``L`` expression).

``L('objects').attr`` is ``[item.attr for item in batch.objects]``, ``L('objects')[key]`` indexes every item,
``L('objects').method(*args)`` calls it on every item (arguments are evaluated once). Assigned through
(``update(L('objects').attr, values)``), each item gets its entry of ``values``.
"""
from __future__ import annotations

from typing import Any

from .base import Expression, _call_args_repr, evaluate
from .named import BatchExpr, check_mode, combine

__all__ = ['ListExpr']


class ListExpr(Expression):
    """Per-item access to the component ``name``: a chain of attribute, item and call steps."""
    __slots__ = ('_component', '_steps', '_mode')

    def __init__(self, name: str, *, mode: str = 'w', _steps: tuple = ()):
        if not isinstance(name, str) or not name:
            raise TypeError(f"Expected L(name) with the name of a batch component. Received: name={name!r}.")
        self._component, self._steps, self._mode = name, _steps, check_mode(mode)

    def _then(self, step: tuple) -> ListExpr:
        return ListExpr(self._component, mode=self._mode, _steps=self._steps + (step,))

    def __getattr__(self, name: str) -> ListExpr:
        if name.startswith('_'):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return self._then(('attr', name))

    def __getitem__(self, key: Any) -> ListExpr:
        return self._then(('item', key))

    def __call__(self, *args: Any, **kwargs: Any) -> ListExpr:
        return self._then(('call', args, kwargs))

    def _items(self, ctx: Any, steps: tuple) -> list:
        values = list(BatchExpr(self._component).get(ctx))
        for step in steps:
            values = _apply(step, values, ctx)
        return values

    def get(self, ctx: Any) -> list:
        return self._items(ctx, self._steps)

    def set(self, value: Any, ctx: Any, mode: str | None = None) -> None:
        mode = self._mode if mode is None else check_mode(mode)
        if not self._steps:
            BatchExpr(self._component).set(value, ctx, mode)
            return
        kind, *rest = self._steps[-1]
        if kind == 'call':
            raise TypeError(f"Expected an attribute or an item as the target. Received: {self!r}, a call's result, "
                            "which cannot be assigned to.")
        owners = self._items(ctx, self._steps[:-1])
        if len(value) != len(owners):
            raise ValueError(f"Expected one value per batch item ({len(owners)}) to assign to {self!r}. Received "
                             f"{len(value)} values.")
        key = rest[0] if kind == 'attr' else evaluate(rest[0], ctx)
        for owner, item_value in zip(owners, value):
            _write(owner, kind, key, item_value, mode, self)

    def __repr__(self) -> str:
        text = f'L({self._component!r})'
        for kind, *rest in self._steps:
            if kind == 'attr':
                text += f'.{rest[0]}'
            elif kind == 'item':
                text += f'[{rest[0]!r}]'
            else:
                text += f'({_call_args_repr(*rest)})'
        return text


def _apply(step: tuple, values: list, ctx: Any) -> list:
    kind, *rest = step
    if kind == 'attr':
        return [getattr(value, rest[0]) for value in values]
    if kind == 'item':
        key = evaluate(rest[0], ctx)
        return [value[key] for value in values]
    args, kwargs = evaluate(rest[0], ctx), evaluate(rest[1], ctx)
    return [value(*args, **kwargs) for value in values]


def _write(owner: Any, kind: str, key: Any, value: Any, mode: str, target: Any) -> None:
    if mode == 'w':
        new = value
    else:
        current = getattr(owner, key) if kind == 'attr' else owner[key]
        new = combine(current, value, mode, target)
        if new is current:
            return
    if kind == 'attr':
        setattr(owner, key, new)
    else:
        owner[key] = new
