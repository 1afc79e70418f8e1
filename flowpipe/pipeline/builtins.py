"""The built-in actions every pipeline has: variables, calls, printing, and the batch-flow actions.

``rebatch``, ``join`` and ``merge`` change which batches flow rather than what happens to one batch; they are
registered here (so that names resolve and arguments are checked at declaration) and carried out by
``flowpipe.execution``.
"""
from __future__ import annotations

import builtins as _py
import numbers
from typing import Any, Callable

from ..expr import assign, evaluate
from ..expr.context import Context
from .pipeline import Pipeline
from .registry import builtin

__all__ = ['STRUCTURAL', 'call', 'init_variable', 'print_action', 'update']

# Built-ins carried out by the execution engine itself rather than by calling their function.
STRUCTURAL = ('join', 'merge', 'rebatch')


def _normalised(arguments: Callable[..., dict]) -> Callable[[tuple, dict], tuple[tuple, dict]]:
    """The ``on_declare`` that passes a built-in's arguments as the keywords ``arguments`` returns; the call has
    been bound to ``arguments``' parameters (the built-in's ``signature``) already, in ``make_record``."""
    def declare(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return (), arguments(*args, **kwargs)
    return declare


def _variable_arguments(name: str, default: Any = None) -> dict:
    if not isinstance(name, str) or not name:
        raise TypeError(f"Expected a variable name (a non-empty str). Received: name={name!r}")
    return {'name': name, 'default': default}


@builtin(per_batch=False, on_declare=_normalised(_variable_arguments), signature=_variable_arguments)
def init_variable(ctx: Context, name: str, default: Any = None) -> None:
    """Declare the variable ``name`` with ``default``; set once per pipeline lifetime, before the first batch.

    The pipeline applies declarations itself (``PipelineState.declare_variables``); this function only runs
    when called directly.
    """
    with ctx.variables.lock:
        ctx.variables.setdefault(name, default)


def _update_arguments(target: Any, value: Any = None, mode: str = 'w') -> dict:
    if not callable(getattr(target, 'set', None)):
        raise TypeError(f"Expected an assignable named expression as the target (V('x'), B('images')...). "
                        f"Received: target={target!r}")
    if mode not in ('w', 'a', 'e', 'u'):
        raise ValueError(f"Expected mode 'w', 'a', 'e' or 'u'. Received: mode={mode!r}")
    return {'target': target, 'value': value, 'mode': mode}


@builtin(keep=('target',), on_declare=_normalised(_update_arguments), signature=_update_arguments)
def update(ctx: Context, target: Any, value: Any = None, mode: str = 'w') -> None:
    """Assign ``value`` to ``target`` (``V('x')``, ``B('comp')``...); ``mode`` ``'w'`` keeps the target's own mode."""
    if mode == 'w':
        assign(target, value, ctx)
    else:
        target.set(value, ctx, mode=mode)


builtin('save_to', keep=('target',), on_declare=_normalised(_update_arguments),
        signature=_update_arguments)(update)


def _declare_call(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if not args:
        raise TypeError("Expected call(func, *args, save_to=None, **kwargs). Received: no func. "
                        "Pass the function to call as the first argument.")
    return args, kwargs


@builtin(keep=('save_to',), join_at=1, on_declare=_declare_call)
def call(ctx: Context, func: Callable, *args: Any, save_to: Any = None, **kwargs: Any) -> None:
    """Call ``func(*args, **kwargs)`` with evaluated arguments (``B()`` is the batch); store the result in ``save_to``."""
    if not callable(func):
        raise TypeError(f"Expected call()'s first argument to be callable. Received: {func!r}")
    result = func(*args, **kwargs)
    if save_to is not None:
        assign(save_to, result, ctx)


def _print_form(*args: Any, sep: str | None = ' ', end: str | None = '\n', file: Any = None,
                flush: bool = False) -> None:
    """The arguments of the ``print`` action: those of the built-in ``print``."""


@builtin('print', signature=_print_form)
def print_action(ctx: Context, *args: Any, **kwargs: Any) -> None:
    """Print the evaluated arguments (``print(B.size, V('loss'))``), like the built-in ``print``; in a distributed
    run, on rank 0 only."""
    if _main_rank():
        _py.print(*args, **kwargs)


def _main_rank() -> bool:
    from ..data.shards import run_world
    world = run_world()
    return world is None or world.rank == 0


def _structural(ctx: Context, *args: Any, **kwargs: Any) -> None:
    raise RuntimeError("rebatch/join/merge are carried out by the pipeline's execution, not called directly.")


def _declare_pipelines(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if not args or kwargs:
        raise TypeError(f"Expected one or more pipelines. Received: args={args!r}, kwargs={kwargs!r}")
    for pipeline in args:
        if not isinstance(pipeline, Pipeline):
            raise TypeError(f"Expected pipelines to join or merge. Received: {pipeline!r}")
    return args, {}


def _rebatch_arguments(batch_size: int, merge: Callable | None = None, components: Any = None,
                       batch_class: type | None = None, drop_last: bool = False) -> dict:
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1:
        raise ValueError(f"Expected rebatch's batch_size to be a positive int. Received: {batch_size!r}")
    if merge is not None and not callable(merge):
        raise TypeError(f"Expected merge to be a callable merge(batches, batch_size) -> (batch, rest). "
                        f"Received: merge={merge!r}")
    return {'batch_size': int(batch_size), 'merge': merge, 'drop_last': bool(drop_last),
            'options': _merge_options(components, batch_class)}


def _merge_options(components: Any, batch_class: type | None) -> dict:
    """``Batch.merge``'s keywords: which components to keep and the class of the merged batch."""
    if batch_class is not None and not isinstance(batch_class, type):
        raise TypeError(f"Expected batch_class to be a Batch class. Received: batch_class={batch_class!r}")
    return {key: value for key, value in (('components', components), ('batch_class', batch_class))
            if value is not None}


def _declare_merge(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    fn = kwargs.get('fn')                           # the keywords are _merge_form's: make_record checked them
    if fn is not None and not callable(fn):
        raise TypeError(f"Expected fn to be a callable fn(batches) -> (batch, rest). Received: fn={fn!r}")
    _declare_pipelines(args, {})
    return args, {'fn': fn, 'options': _merge_options(kwargs.get('components'), kwargs.get('batch_class'))}


def _join_form(*pipelines: Pipeline) -> None:
    """The arguments of ``join``."""


def _merge_form(*pipelines: Pipeline, fn: Callable | None = None, components: Any = None,
                batch_class: type | None = None) -> None:
    """The arguments of ``merge``."""


@builtin('join', on_declare=_declare_pipelines, signature=_join_form)
def _join(ctx: Context, *args: Any, **kwargs: Any) -> None:
    """Take the next batch of each of ``pipelines`` along with this pipeline's batch: the next action gets them
    as extra positional arguments after its own (``call(fn)``: ``fn(batch, *joined)``).

    Args:
        *pipelines: the pipelines (bound to their datasets) whose batches come along, one each per batch.
    """
    _structural(ctx)


@builtin('merge', on_declare=_declare_merge, signature=_merge_form)
def _merge(ctx: Context, *args: Any, **kwargs: Any) -> None:
    """Merge this pipeline's batch with the next batch of each of ``pipelines`` into one batch.

    Args:
        *pipelines: the pipelines whose batches are merged in.
        fn: ``fn(batches) -> (batch, rest)``, how to merge (``Batch.merge`` by default).
        components: the components the merged batch keeps (all by default).
        batch_class: the class of the merged batch (this pipeline's by default).
    """
    _structural(ctx)


@builtin('rebatch', on_declare=_normalised(_rebatch_arguments), signature=_rebatch_arguments)
def _rebatch(ctx: Context, *args: Any, **kwargs: Any) -> None:
    """Collect the items of the batches so far into batches of ``batch_size`` items for the actions after it.

    Args:
        batch_size: the items of each new batch.
        merge: ``merge(batches, batch_size) -> (batch, rest)``, how to cut (``Batch.merge`` by default).
        components: the components the new batches keep (all by default).
        batch_class: the class of the new batches.
        drop_last: drop the last, shorter batch of a run.
    """
    _structural(ctx)
