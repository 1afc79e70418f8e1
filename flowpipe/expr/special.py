"""Computed expressions: ``F`` (call), ``R`` (random), ``I`` (iteration), ``W`` (wrap), ``P`` (per item).

``P(expr)`` produces a ``PerItem`` sequence with one value per batch item, which ``apply_parallel`` indexes:
a value that already has one entry per item is split, a scalar is repeated, and ``P(R(...))`` draws one value
per item (``size=batch_size``, or ``(batch_size, *size)`` when ``R`` was given a ``size``).
"""
from __future__ import annotations

import difflib
import functools
import inspect
import sys
import warnings
from collections.abc import Mapping
from typing import Any, Callable

import numpy as np

from .. import safe_pickle
from .base import CallExpr, Expression, _call_args_repr, evaluate

__all__ = ['FuncExpr', 'IterationExpr', 'PerItem', 'PerItemExpr', 'RandomExpr', 'WrapExpr', 'draw_for_items']


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
    batchflow's forms work too: ``R(['a', 'b'], p=[.9, .1])`` draws with ``choice`` from the list, and ``seed=``
    draws from a generator made from that seed and the batch's number instead of the run's seed.

    A ``size`` read from the batch whose first entry is the batch's number of items (``size=B.x.shape``,
    ``size=(B.size, 3)``) draws one row per item: on a rank's shard of a global batch the rows are drawn for the
    whole global batch and cut to the shard, so every item gets the row it gets in one process, whatever the
    world size. Any other draw whose arguments read the batch would depend on the shard: said once per run.
    """
    __slots__ = ('_method', '_args', '_kwargs', '_seed', '_reads_batch')

    def __init__(self, method: str | Callable | list, *args: Any, seed: int | None = None, **kwargs: Any):
        if isinstance(method, (list, tuple, np.ndarray)):
            method, args = 'choice', (method, *args)
        if not callable(method) and (not isinstance(method, str) or method.startswith('_') or not callable(
                getattr(np.random.Generator, method, None))):
            known = [name for name in dir(np.random.Generator) if not name.startswith('_')]
            close = difflib.get_close_matches(str(method), known, n=3)
            hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ''
            raise ValueError(f"Expected R(method, ...) with a method of numpy.random.Generator such as 'uniform', "
                             f"'normal', 'integers' or 'choice', a list to choose from, or a callable. "
                             f"Received: method={method!r}.{hint}")
        self._method, self._args, self._kwargs, self._seed = method, args, kwargs, seed
        self._reads_batch: bool | None = None       # whether an argument reads the batch: found on first need

    def _generator(self, ctx: Any) -> Any:
        if self._seed is None:
            return ctx.random
        key = tuple(getattr(ctx.seed, 'spawn_key', ()))
        return np.random.default_rng(np.random.SeedSequence(self._seed, spawn_key=key))

    def _call(self, ctx: Any, kwargs: dict) -> Any:
        args = evaluate(self._args, ctx) if self._args else ()
        if isinstance(self._method, str):
            return getattr(self._generator(ctx), self._method)(*args, **kwargs)
        if 'rng' not in kwargs and _takes(self._method, 'rng'):
            kwargs['rng'] = self._generator(ctx)
        return self._method(*args, **kwargs)

    def get(self, ctx: Any) -> Any:
        kwargs = dict(evaluate(self._kwargs, ctx)) if self._kwargs else {}
        shard = getattr(getattr(ctx.batch, 'index', None), 'shard', None)
        if shard is None or shard.stop - shard.start == shard.size:
            return self._call(ctx, kwargs)
        return self._draw_on_shard(ctx, kwargs, shard)

    def _draw_on_shard(self, ctx: Any, kwargs: dict, shard: Any) -> Any:
        """The draw on a rank's shard of a global batch: per-item rows drawn for the global batch and cut to the
        shard; any other draw that reads the batch is made for the shard, and said once per run."""
        if self._reads_batch is None:
            self._reads_batch = _reads_batch((self._args, self._kwargs))
        if not self._reads_batch:
            return self._call(ctx, kwargs)
        size = kwargs.get('size')
        rows = shard.stop - shard.start
        if size is not None and np.ndim(size) <= 1 and np.size(size) and int(np.atleast_1d(size)[0]) == rows:
            kwargs['size'] = (shard.size, *np.atleast_1d(size).tolist()[1:])
            return shard.take(self._call(ctx, kwargs))
        said = shard.said if shard.said is not None else set()
        if repr(self) not in said:
            said.add(repr(self))
            action = _running_action()
            where = f" in action {action}" if action else ''
            warnings.warn(f"flowpipe: {self!r}{where} reads the batch, and its size does not start with the "
                          f"batch's number of items (size={size!r} on a shard of {rows}): on this rank it draws "
                          "for its shard, so its values depend on the number of ranks and differ from one "
                          "process's. Give a size whose first entry is the batch's size (size=B.x.shape, "
                          "size=(B.size, ...)) or P(R(...)) to draw one value per item, the same on every layout.",
                          UserWarning, stacklevel=2)
        return self._call(ctx, kwargs)

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
        kwargs = self._kwargs if self._seed is None else {**self._kwargs, 'seed': self._seed}
        return f'R({_call_args_repr((method, *self._args), kwargs)})'


class _Name:
    """Shows a callable by its name in a repr."""

    def __init__(self, func: Callable):
        self._text = getattr(func, '__qualname__', None) or repr(func)

    def __repr__(self) -> str:
        return self._text


def _running_action() -> str | None:
    """The label of the pipeline action whose arguments are being evaluated in this thread (the innermost
    ``flowpipe.execution.steps`` step on the stack), ``None`` outside one; read only to name it in a warning."""
    frame = sys._getframe(1)
    while frame is not None:
        step = frame.f_locals.get('self')
        if type(step).__module__.endswith('execution.steps') and isinstance(getattr(step, 'label', None), str):
            return step.label
        frame = frame.f_back
    return None


def _reads_batch(obj: Any) -> bool:
    """Whether the named expressions in ``obj`` read the batch (``B``, ``B.name``), containers and expressions
    walked."""
    from .named import BatchExpr
    from .roots import Root
    if isinstance(obj, (BatchExpr, Root)):
        return isinstance(obj, BatchExpr) or repr(obj) == 'B'
    if isinstance(obj, dict):
        return any(_reads_batch(value) for value in obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return any(_reads_batch(item) for item in obj)
    if isinstance(obj, Expression):
        return any(_reads_batch(getattr(obj, slot, None)) for klass in type(obj).__mro__
                   for slot in getattr(klass, '__slots__', ()) if slot != '_reads_batch')
    return False


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


def accepts_rng(func: Callable) -> bool:
    """Whether ``func`` takes a keyword argument named ``rng`` (a bound method: its function's signature)."""
    return _accepts_rng(getattr(func, '__func__', func))


@functools.lru_cache(maxsize=256)
def _accepts_rng(func: Callable) -> bool:
    return _takes(func, 'rng')


_ITERATION_KINDS = {'current': 'c', 'maximum': 'm', 'total': 'm', 'ratio': 'r', 'epoch': 'e'}


class IterationExpr(Expression):
    """``I('c')`` 0-based iteration, ``I('m')`` total batches (or ``None``), ``I('r')`` ratio ``(c + 1) / m``,
    ``I('epoch')`` the 0-based epoch of the batch's first item.

    Any start of ``'current'``, ``'maximum'``/``'total'``, ``'ratio'`` or ``'epoch'`` names a kind (``I('max')``,
    ``I.total``).
    """
    __slots__ = ('_kind',)

    def __init__(self, kind: str = 'c'):
        found = {short for word, short in _ITERATION_KINDS.items() if isinstance(kind, str) and kind
                 and word.startswith(kind)}
        if len(found) != 1:
            raise ValueError(f"Expected I('c'|'current'), I('m'|'max'|'total'), I('r'|'ratio') or I('e'|'epoch'). "
                             f"Received: {kind!r}.")
        self._kind = found.pop()

    def get(self, ctx: Any) -> Any:
        if self._kind == 'c':
            return ctx.iteration
        if self._kind == 'm':
            return ctx.total
        if self._kind == 'e':
            if ctx.epoch is None:
                raise ValueError("Expected a batch of a run's first stage for I('epoch'). Received: a batch after "
                                 "rebatch, or no batch. Read I('epoch') before the rebatch action.")
            return ctx.epoch
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

    def __reduce__(self) -> tuple:
        return PerItem, (list(self),)          # rebuilt from a list: what torch's safe reader fills


safe_pickle.allow(PerItem)


def batch_size(batch: Any) -> int:
    """The number of items in ``batch`` (its ``size`` attribute, else ``len``)."""
    size = getattr(batch, 'size', None)
    if isinstance(size, (int, np.integer)):
        return int(size)
    try:
        return len(batch)
    except TypeError:
        raise TypeError(f"Expected a batch with a size (or a length) for P(...). Received: {batch!r}.") from None


def draw_for_items(batch: Any, n_items: int, draw: Callable[[int], Any]) -> Any:
    """``draw(n_items)``: one random value per item of ``batch``. In a distributed run a batch is one rank's shard
    of a global batch (its index's ``shard``): the values are drawn for the whole global batch and cut to the
    shard, so every item gets what it would get in one process, whatever the world size."""
    shard = getattr(getattr(batch, 'index', None), 'shard', None)
    if shard is None or shard.stop - shard.start != n_items:
        return draw(n_items)
    return shard.take(draw(shard.size))


class PerItemExpr(Expression):
    """``P(expr)``: ``expr`` as a ``PerItem`` sequence with one value per batch item.

    ``each=True`` (the root ``PP``) evaluates ``expr`` once per item instead: ``PP(R('normal', 0, 1))`` draws
    each item's value separately, ``PP(F(make))`` calls ``make`` once per item.
    """
    __slots__ = ('_inner', '_each')

    def __init__(self, inner: Any, each: bool = False):
        self._inner, self._each = inner, each

    def get(self, ctx: Any) -> PerItem:
        n_items = batch_size(ctx.batch)
        if self._each:
            return PerItem(draw_for_items(ctx.batch, n_items, lambda n: [evaluate(self._inner, ctx) for _ in range(n)]))
        if isinstance(self._inner, RandomExpr):
            return PerItem(draw_for_items(ctx.batch, n_items, lambda n: self._inner.draw(ctx, n)))
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
        return f"{'PP' if self._each else 'P'}({self._inner!r})"
