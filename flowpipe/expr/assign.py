"""``assign(target, value, ctx)``: write a value through assignable expressions (``save_to=`` of actions)."""
from __future__ import annotations

from typing import Any

from .base import Expression

__all__ = ['assign', 'save_data_to']


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


def save_data_to(data: Any, dst: Any, pipeline: Any = None, batch: Any = None) -> None:
    """Write ``data`` to ``dst`` now, outside a run (batchflow's ``save_data_to``).

    Args:
        data: a value, a list of values (one per target) or a dict of them (keyed as ``dst``).
        dst: a numpy array (filled in place), an assignable expression (``V``/``B``), or a list or dict of them.
        pipeline: the pipeline whose variables ``V`` targets write to.
        batch: the batch ``B`` targets write to.

    Raises:
        TypeError: a ``C`` target: a pipeline's config is part of its immutable definition (``pipeline << {...}``).
    """
    from .context import Context
    from .named import ConfigExpr
    if isinstance(dst, dict):
        if not isinstance(data, dict) or not dst.keys() <= data.keys():
            raise ValueError(f"Expected data to be a dict holding every key of dst {list(dst)!r}. Received: "
                             f"{type(data).__name__} {data!r:.80}")
        targets, values = list(dst.values()), [data[key] for key in dst]
    elif isinstance(dst, (list, tuple)):
        targets, values = list(dst), list(data) if isinstance(data, (list, tuple)) else [data]
    else:
        targets, values = [dst], [data]
    if len(targets) != len(values):
        raise ValueError(f"Expected one value per target ({len(targets)}). Received {len(values)} values")
    if any(isinstance(target, ConfigExpr) for target in targets):
        raise TypeError("Expected V or B targets: a pipeline's config is part of its immutable definition, so C "
                        "cannot be written outside a run. Write pipeline = pipeline << {key: value} instead "
                        "(see docs/porting.md#immutable-pipelines).")
    ctx = Context(batch=batch, variables=pipeline.variables, models=pipeline.models, pipeline=pipeline,
                  dataset=pipeline.dataset) if pipeline is not None else Context(batch=batch)
    for target, value in zip(targets, values):
        if hasattr(target, 'shape') and hasattr(target, '__setitem__') and not isinstance(target, Expression):
            target[...] = value
        else:
            assign(target, value, ctx)
