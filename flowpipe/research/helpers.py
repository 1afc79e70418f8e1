"""Small helpers batchflow's research code calls from its units."""
from __future__ import annotations

import copy
from typing import Any, Sequence

__all__ = ['get_metrics']


def get_metrics(pipeline: Any, metrics_var: str, metrics_name: str | Sequence[str], *args: Any,
                agg: str | None = 'mean', **kwargs: Any) -> Any:
    """The value of the metrics ``metrics_name`` of the metrics a pipeline gathered into its variable
    ``metrics_var``, aggregated by ``agg``; other arguments go to ``evaluate``. One name (or a list of one) gives its
    value, several names a list of values in their order, as batchflow's ``research.get_metrics`` (a unit:
    ``add_callable(get_metrics, pipeline=E('ppl').pipeline, ...)``).

    The variable holds one metrics object (``save_to=V(metrics_var, mode='u')``) or a list of them (``mode='a'``,
    batchflow's spelling, which flowpipe keeps as a list): a list is evaluated as its objects updated into one.
    """
    names = [metrics_name] if isinstance(metrics_name, str) else list(metrics_name)
    if not names:
        raise ValueError(f"Expected one metric name or more. Received: metrics_name={metrics_name!r}.")
    metrics = _combined(pipeline.v(metrics_var), metrics_var)
    values = [metrics.evaluate(name, agg, *args, **kwargs) for name in names]
    return values[0] if len(values) == 1 else values


def _combined(value: Any, name: str) -> Any:
    parts = list(value) if isinstance(value, (list, tuple)) else [value]
    if not parts or not all(callable(getattr(part, 'evaluate', None)) for part in parts):
        raise TypeError(f"Expected the variable {name!r} to hold a metrics object or a list of them "
                        f"(gather_metrics(..., save_to=V({name!r}, mode='u' or 'a'))). Received: "
                        f"{type(value).__name__} {value!r:.80}.")
    if len(parts) == 1:
        return parts[0]
    combined = copy.deepcopy(parts[0])      # the variable's own objects stay as they are
    for part in parts[1:]:
        combined.update(part)
    return combined
