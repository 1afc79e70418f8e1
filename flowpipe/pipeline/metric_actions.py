"""``gather_metrics``: metrics of a model's predictions, gathered batch by batch into a variable."""
from __future__ import annotations

from typing import Any

from ..expr import assign
from ..expr.context import Context
from .registry import builtin

__all__ = ['KINDS', 'gather_metrics', 'metrics_class']

# batchflow's names of the metrics kinds; a part of one name picks it too ('class', 'seg', 'regr')
KINDS = {'classification': 'ClassificationMetrics', 'segmentation': 'SegmentationMetricsByPixels',
         'mask': 'SegmentationMetricsByPixels', 'instance': 'SegmentationMetricsByInstances',
         'regression': 'RegressionMetrics', 'loss': 'Loss'}


def metrics_class(kind: Any) -> type:
    """The metrics class for ``kind``: a name of ``KINDS`` (or a part of exactly one) or a class of your own."""
    if isinstance(kind, str):
        matches = [name for name in KINDS if kind == name] or [name for name in KINDS if kind and kind in name]
        if len(matches) != 1:
            raise ValueError(f"Expected gather_metrics' kind among {sorted(KINDS)} (or a part of exactly one), or "
                             f"a metrics class. Received: {kind!r}" + (f", which matches {matches}" if matches
                                                                       else ""))
        from ..models import metrics
        return getattr(metrics, KINDS[matches[0]])
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
