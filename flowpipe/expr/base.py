"""The ``Expression`` base class and its algebra.

An expression is a lazy value: ``get(ctx)`` computes it while a batch is processed. Operators on expressions
build new expressions (``V('loss') + 1``, ``B.images[0]``, ``B.labels == 3``) instead of computing anything.
Python's ``and``/``or``/``not``/``if`` need a real ``bool``, which an expression does not have until it is
evaluated: ``bool(expr)`` raises and ``&``/``|``/``~`` combine expressions instead.
"""
from __future__ import annotations

import operator
from typing import Any, Callable

__all__ = ['Expression', 'MISSING', 'contains_expressions', 'evaluate']


class _Missing:
    """The marker for "no default given" (a named singleton so that it pickles to itself)."""

    def __repr__(self) -> str:
        return 'MISSING'

    def __reduce__(self):
        return 'MISSING'


MISSING = _Missing()

_PLAIN = frozenset({int, float, str, bytes, bool, type(None), complex})


class Expression:
    """A value that exists only while a batch is processed.

    Subclasses implement ``get(ctx)``; assignable ones (``B``, ``C``, ``V``) implement ``set``. Every attribute
    name that does not start with ``_`` and is not a method here builds an attribute expression, so internal
    state lives in ``_``-prefixed slots.
    """
    __slots__ = ()
    # numpy would otherwise treat an expression as an object scalar: make it defer to the reflected operators.
    __array_ufunc__ = None

    def get(self, ctx: Any) -> Any:
        """The value of the expression in ``ctx``."""
        raise NotImplementedError(f"{type(self).__name__} does not define get()")

    def set(self, value: Any, ctx: Any, mode: str | None = None) -> None:
        """Assign ``value`` through the expression; only ``B``, ``C`` and ``V`` expressions are assignable."""
        raise TypeError(f"Expected an assignable expression (B('name'), V('name') or C('key')) as a target. "
                        f"Received: {self!r}, which cannot be assigned to. Save to a B, V or C expression instead.")

    # composition

    def __getattr__(self, name: str) -> Expression:
        if name.startswith('_'):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return AttrExpr(self, name)

    def __getitem__(self, key: Any) -> Expression:
        return ItemExpr(self, key)

    def __call__(self, *args: Any, **kwargs: Any) -> Expression:
        return CallExpr(self, args, kwargs)

    def str(self) -> Expression:
        """An expression for ``str(value)``."""
        return UnaryExpr(self, 'str')

    def format(self, *args: Any, **kwargs: Any) -> Expression:
        """An expression for ``value.format(*args, **kwargs)``: the value is the template, args are evaluated."""
        return CallExpr(AttrExpr(self, 'format'), args, kwargs)

    # Python protocols an expression cannot honour before it is evaluated

    def __bool__(self) -> bool:
        raise TypeError(f"Expected a plain value in a Python condition (if/and/or/not). Received: {self!r}, an "
                        "expression that has no value until a batch is processed. Combine expressions with "
                        "& (and), | (or), ~ (not), or evaluate it first.")

    def __iter__(self):
        raise TypeError(f"Expected an iterable. Received: {self!r}, an expression that has no value until a batch "
                        "is processed. Index it (expr[0]) instead of unpacking or iterating.")

    def __contains__(self, item: Any) -> bool:
        raise TypeError(f"Expected a container for 'in'. Received: {self!r}, an expression without a value yet. "
                        "Use F(lambda x, c: x in c)(item, expr) instead.")

    __hash__ = object.__hash__


def _binary(symbol: str, func: Callable) -> tuple[Callable, Callable]:
    def forward(self, other):
        return BinaryExpr(symbol, func, self, other)

    def reflected(self, other):
        return BinaryExpr(symbol, func, other, self)
    return forward, reflected


_BINARY = {
    'add': ('+', operator.add), 'sub': ('-', operator.sub), 'mul': ('*', operator.mul),
    'truediv': ('/', operator.truediv), 'floordiv': ('//', operator.floordiv), 'mod': ('%', operator.mod),
    'pow': ('**', operator.pow), 'matmul': ('@', operator.matmul),
    'and': ('&', operator.and_), 'or': ('|', operator.or_), 'xor': ('^', operator.xor),
}
_COMPARE = {'lt': ('<', operator.lt), 'le': ('<=', operator.le), 'gt': ('>', operator.gt),
            'ge': ('>=', operator.ge), 'eq': ('==', operator.eq), 'ne': ('!=', operator.ne)}
_UNARY = {'neg': ('-', operator.neg), 'pos': ('+', operator.pos), 'invert': ('~', operator.invert),
          'abs': ('abs', abs), 'str': ('str', str)}


def _install_operators() -> None:
    for name, (symbol, func) in _BINARY.items():
        forward, reflected = _binary(symbol, func)
        setattr(Expression, f'__{name}__', forward)
        setattr(Expression, f'__r{name}__', reflected)
    for name, (symbol, func) in _COMPARE.items():
        setattr(Expression, f'__{name}__', _binary(symbol, func)[0])
    for name in ('neg', 'pos', 'invert', 'abs'):
        setattr(Expression, f'__{name}__', lambda self, _name=name: UnaryExpr(self, _name))


def _operand_repr(obj: Any) -> str:
    return f'({obj!r})' if isinstance(obj, BinaryExpr) else repr(obj)


class BinaryExpr(Expression):
    """``left <op> right`` where either side may be an expression."""
    __slots__ = ('_symbol', '_func', '_left', '_right')

    def __init__(self, symbol: str, func: Callable, left: Any, right: Any):
        self._symbol, self._func, self._left, self._right = symbol, func, left, right

    def get(self, ctx: Any) -> Any:
        return self._func(evaluate(self._left, ctx), evaluate(self._right, ctx))

    def __repr__(self) -> str:
        return f'{_operand_repr(self._left)} {self._symbol} {_operand_repr(self._right)}'


class UnaryExpr(Expression):
    """``-x``, ``+x``, ``~x``, ``abs(x)`` or ``str(x)`` of an expression."""
    __slots__ = ('_operand', '_name')

    def __init__(self, operand: Any, name: str):
        self._operand, self._name = operand, name

    def get(self, ctx: Any) -> Any:
        return _UNARY[self._name][1](evaluate(self._operand, ctx))

    def __repr__(self) -> str:
        symbol = _UNARY[self._name][0]
        if self._name == 'str':
            return f'{self._operand!r}.str()'
        if symbol.isalpha():
            return f'{symbol}({self._operand!r})'
        return f'{symbol}{_operand_repr(self._operand)}'


class AttrExpr(Expression):
    """``expr.name``: an attribute of the expression's value."""
    __slots__ = ('_obj', '_attr')

    def __init__(self, obj: Any, attr: str):
        self._obj, self._attr = obj, attr

    def get(self, ctx: Any) -> Any:
        return getattr(evaluate(self._obj, ctx), self._attr)

    def __repr__(self) -> str:
        return f'{_operand_repr(self._obj)}.{self._attr}'


class ItemExpr(Expression):
    """``expr[key]``: an item of the expression's value (the key may be an expression too)."""
    __slots__ = ('_obj', '_key')

    def __init__(self, obj: Any, key: Any):
        self._obj, self._key = obj, key

    def get(self, ctx: Any) -> Any:
        return evaluate(self._obj, ctx)[evaluate(self._key, ctx)]

    def __repr__(self) -> str:
        return f'{_operand_repr(self._obj)}[{self._key!r}]'


class CallExpr(Expression):
    """``expr(*args, **kwargs)``: a call of the expression's value with evaluated arguments."""
    __slots__ = ('_func', '_args', '_kwargs')

    def __init__(self, func: Any, args: tuple, kwargs: dict):
        self._func, self._args, self._kwargs = func, args, kwargs

    def get(self, ctx: Any) -> Any:
        func = evaluate(self._func, ctx)
        args = evaluate(self._args, ctx) if self._args else ()
        kwargs = evaluate(self._kwargs, ctx) if self._kwargs else {}
        return func(*args, **kwargs)

    def __repr__(self) -> str:
        return f'{_operand_repr(self._func)}({_call_args_repr(self._args, self._kwargs)})'


def _call_args_repr(args: tuple, kwargs: dict) -> str:
    parts = [repr(arg) for arg in args] + [f'{key}={value!r}' for key, value in kwargs.items()]
    return ', '.join(parts)


_install_operators()


def evaluate(obj: Any, ctx: Any) -> Any:
    """``obj`` with every expression in it replaced by its value in ``ctx``.

    Lists, tuples (namedtuples too), dicts (keys too), sets and ``Config`` objects are walked recursively; a
    container without expressions comes back as the same object, so constants are never copied.
    ``W(expr)`` evaluates to ``expr`` itself.
    """
    kind = type(obj)
    if kind in _PLAIN:
        return obj
    if isinstance(obj, Expression):
        return obj.get(ctx)
    if kind is list or kind is tuple:
        values = _evaluate_items(obj, ctx)
        if values is None:
            return obj
        return values if kind is list else tuple(values)
    if isinstance(obj, dict):
        return _evaluate_dict(obj, ctx)
    if isinstance(obj, (list, tuple, set, frozenset)):
        return _evaluate_collection(obj, ctx)
    return obj


def _evaluate_items(items: list | tuple, ctx: Any) -> list | None:
    """The evaluated items, or ``None`` when no item changed (then the caller keeps the original)."""
    values = None
    for position, item in enumerate(items):
        new = evaluate(item, ctx)
        if values is not None:
            values.append(new)
        elif new is not item:
            values = list(items[:position])
            values.append(new)
    return values


def _evaluate_dict(obj: dict, ctx: Any) -> dict:
    items = None
    plain = _PLAIN
    for position, (key, value) in enumerate(obj.items()):
        new_key = key if type(key) in plain else evaluate(key, ctx)
        new_value = value if type(value) in plain else evaluate(value, ctx)
        if items is not None:
            items.append((new_key, new_value))
        elif new_key is not key or new_value is not value:
            items = list(obj.items())[:position]
            items.append((new_key, new_value))
    if items is None:
        return obj
    if type(obj) is dict:
        return dict(items)
    new = obj.copy()  # keeps what the subclass carries besides items (a defaultdict's factory)
    new.clear()
    new.update(dict(items))
    return new


def _evaluate_collection(obj: Any, ctx: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        # set items have no order, so the walk cannot tell unchanged items position by position
        if not any(contains_expressions(item) for item in obj):
            return obj
        return type(obj)(evaluate(item, ctx) for item in obj)
    values = _evaluate_items(list(obj), ctx)
    if values is None:
        return obj
    if hasattr(type(obj), '_fields'):
        return type(obj)(*values)
    return type(obj)(values)


def contains_expressions(obj: Any) -> bool:
    """Whether ``obj`` is an expression or a list, tuple, dict (keys too) or set that holds one at any depth."""
    if isinstance(obj, Expression):
        return True
    kind = type(obj)
    if kind in _PLAIN:
        return False
    if isinstance(obj, dict):
        for key, value in obj.items():
            if contains_expressions(key) or contains_expressions(value):
                return True
        return False
    if isinstance(obj, (list, tuple, set, frozenset)):
        for item in obj:
            if contains_expressions(item):
                return True
    return False
