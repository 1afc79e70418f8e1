"""Computed expressions: ``F`` (call), ``R`` (random), ``I`` (iteration), ``W`` (wrap), ``P`` (per item).

``P(expr)`` produces a ``PerItem`` sequence with one value per batch item, which ``apply_parallel`` indexes:
a value that already has one entry per item is split, a scalar is repeated, and ``P(R(...))`` draws one value
per item (``size=batch_size``, or ``(batch_size, *size)`` when ``R`` was given a ``size``).
"""
from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from .base import CallExpr, Expression, _call_args_repr, evaluate

__all__ = ['FuncExpr', 'IterationExpr', 'PerItem', 'PerItemExpr', 'RandomExpr', 'WrapExpr']


class FuncExpr(CallExpr):
    """``F(func, *args, **kwargs)``: ``func`` called with evaluated arguments; ``F(func)(*args)`` binds them later."""
    __slots__ = ('_bound',)

    def __init__(self, func: Callable, *args: Any, **kwargs: Any):
        if not callable(func) and not isinstance(func, Expression):
            raise TypeError(f"Expected F(func, *args) with a callable func. Received: func={func!r}.")
        super().__init__(func, args, kwargs)
        self._bound = bool(args or kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Expression:
        if self._bound:
            return super().__call__(*args, **kwargs)
        bound = FuncExpr(self._func, *args, **kwargs)
        bound._bound = True  # F(func)() is a call too: a further (...) calls its result
        return bound

    def __repr__(self) -> str:
        name = getattr(self._func, '__qualname__', None) or repr(self._func)
        if not self._bound:
            return f'F({name})'
        return f'F({name})({_call_args_repr(self._args, self._kwargs)})'


class RandomExpr(Expression):
    """``R('uniform', 0, 1, size=3)``: a method of the batch's ``numpy.random.Generator`` with evaluated args.

    ``R(func, *args, **kwargs)`` calls a distribution of your own, ``func(*args, **kwargs)``; a ``func`` that takes
    a keyword ``rng`` gets the batch's generator there, which keeps its draws reproducible from the run's seed.
    ``P(R(func))`` calls it once with ``size=n_items`` when it takes ``size``, else once per item.
    """
    __slots__ = ('_method', '_args', '_kwargs')

    def __init__(self, method: str | Callable, *args: Any, **kwargs: Any):
        if not callable(method) and (not isinstance(method, str) or method.startswith('_') or not callable(
                getattr(np.random.Generator, method, None))):
            known = [name for name in dir(np.random.Generator) if not name.startswith('_')]
            close = difflib.get_close_matches(str(method), known, n=3)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ''
            raise ValueError(f"Expected R(method, ...) with a method of numpy.random.Generator such as 'uniform', "
                             f"'normal', 'integers' or 'choice', or a callable. Received: method={method!r}.{hint}")
        self._method, self._args, self._kwargs = method, args, kwargs

    def _call(self, ctx: Any, kwargs: dict) -> Any:
        args = evaluate(self._args, ctx) if self._args else ()
        if isinstance(self._method, str):
            return getattr(ctx.random, self._method)(*args, **kwargs)
        if 'rng' not in kwargs and _takes(self._method, 'rng'):
            kwargs['rng'] = ctx.random
        return self._method(*args, **kwargs)

    def get(self, ctx: Any) -> Any:
        return self._call(ctx, dict(evaluate(self._kwargs, ctx)) if self._kwargs else {})

    def draw(self, ctx: Any, n_items: int) -> Any:
        """``n_items`` draws at once: ``size`` becomes ``n_items`` or ``(n_items, *size)``."""
        kwargs = dict(evaluate(self._kwargs, ctx)) if self._kwargs else {}
        if not isinstance(self._method, str) and not _takes(self._method, 'size'):
            return [self._call(ctx, dict(kwargs)) for _ in range(n_items)]
        size = kwargs.get('size')
        if size is None:
            kwargs['size'] = n_items
        else:
            kwargs['size'] = (n_items, *np.atleast_1d(size).tolist())
        return self._call(ctx, kwargs)

    def __repr__(self) -> str:
        method = self._method if isinstance(self._method, str) else _Name(self._method)
        return f'R({_call_args_repr((method, *self._args), self._kwargs)})'


class _Name:
    """Shows a callable by its name in a repr."""

    def __init__(self, func: Callable):
        self._text = getattr(func, '__qualname__', None) or repr(func)

    def __repr__(self) -> str:
        return self._text


def _takes(func: Callable, name: str) -> bool:
    """Whether ``func`` names a keyword argument ``name`` (``size`` may also go to ``**kwargs``)."""
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return False
    parameter = parameters.get(name)
    if parameter is not None:
        return parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    return name == 'size' and any(p.kind is p.VAR_KEYWORD for p in parameters.values())


_ITERATION_KINDS = {'c': 'c', 'current': 'c', 'm': 'm', 'max': 'm', 'r': 'r', 'ratio': 'r'}


class IterationExpr(Expression):
    """``I('c')`` 0-based iteration, ``I('m')`` total batches (or ``None``), ``I('r')`` ratio ``(c + 1) / m``."""
    __slots__ = ('_kind',)

    def __init__(self, kind: str = 'c'):
        short = _ITERATION_KINDS.get(kind) if isinstance(kind, str) else None
        if short is None:
            raise ValueError(f"Expected I('c'|'current'), I('m'|'max') or I('r'|'ratio'). Received: {kind!r}.")
        self._kind = short

    def get(self, ctx: Any) -> Any:
        if self._kind == 'c':
            return ctx.iteration
        if self._kind == 'm':
            return ctx.total
        if not ctx.total:
            raise ValueError(f"Expected a run with a known number of batches for {self!r}. Received: total="
                             f"{ctx.total!r}. Give run() n_epochs= or n_iters=, or use I('c') instead.")
        return (ctx.iteration + 1) / ctx.total

    def __repr__(self) -> str:
        return f'I({self._kind!r})'


class WrapExpr(Expression):
    """``W(expr)``: evaluates to ``expr`` itself, unevaluated (for actions that take expressions as arguments)."""
    __slots__ = ('_wrapped',)

    def __init__(self, wrapped: Any):
        self._wrapped = wrapped

    def get(self, ctx: Any) -> Any:
        return self._wrapped

    def __repr__(self) -> str:
        return f'W({self._wrapped!r})'


class PerItem(list):
    """One value per batch item, produced by ``P(expr)``."""

    def __repr__(self) -> str:
        return f'PerItem({list.__repr__(self)})'


def batch_size(batch: Any) -> int:
    """The number of items in ``batch`` (its ``size`` attribute, else ``len``)."""
    size = getattr(batch, 'size', None)
    if isinstance(size, (int, np.integer)):
        return int(size)
    try:
        return len(batch)
    except TypeError:
        raise TypeError(f"Expected a batch with a size (or a length) for P(...). Received: {batch!r}.") from None


class PerItemExpr(Expression):
    """``P(expr)``: ``expr`` as a ``PerItem`` sequence with one value per batch item."""
    __slots__ = ('_inner',)

    def __init__(self, inner: Any):
        self._inner = inner

    def get(self, ctx: Any) -> PerItem:
        n_items = batch_size(ctx.batch)
        if isinstance(self._inner, RandomExpr):
            return PerItem(self._inner.draw(ctx, n_items))
        value = evaluate(self._inner, ctx)
        if isinstance(value, (str, bytes, Mapping)):
            return PerItem([value] * n_items)
        try:
            length = len(value)
        except TypeError:
            return PerItem([value] * n_items)
        if length != n_items:
            raise ValueError(f"Expected {self!r} to give one value per batch item ({n_items}). Received a "
                             f"{type(value).__name__} of length {length}. Pass a scalar to repeat it for every item, "
                             "or a sequence as long as the batch.")
        return PerItem(value[i] for i in range(n_items))

    def __repr__(self) -> str:
        return f'P({self._inner!r})'
