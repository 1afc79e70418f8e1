"""``gather_metrics``: metrics of a model's predictions, gathered batch by batch into a variable."""
from __future__ import annotations

from typing import Any

from ..expr import assign
from ..expr.context import Context
from .registry import builtin

__all__ = ['gather_metrics', 'metrics_class']

_KINDS = ('class', 'classification')


def metrics_class(kind: Any) -> type:
    """The metrics class for ``kind``: ``'class'``/``'classification'`` or a class of your own."""
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"Expected gather_metrics('classification', ...) or a metrics class. Received: {kind!r}"
                             "; segmentation-by-instance and regression metrics are not part of flowpipe: pass a "
                             "class of your own")
        from ..models.metrics import ClassificationMetrics
        return ClassificationMetrics
    if not callable(kind):
        raise TypeError(f"Expected a metrics kind (a str) or class. Received: {kind!r}")
    return kind


def _declare(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if not args:
        raise TypeError("Expected gather_metrics(kind, targets=..., predictions=..., save_to=V('metrics', "
                        "mode='u')). Received: no kind")
    metrics_class(args[0])
    return args, kwargs


@builtin(keep=('save_to',), on_declare=_declare)
def gather_metrics(ctx: Context, kind: Any, *args: Any, save_to: Any = None, **kwargs: Any) -> None:
    """Make ``kind``'s metrics of one batch (``targets=``, ``predictions=``, ``fmt=``...) and save them:
    ``save_to=V('metrics', mode='u')`` gathers every batch, ``mode='w'`` keeps the last one."""
    metrics = metrics_class(kind)(*args, **kwargs)
    assign(save_to, metrics, ctx)
