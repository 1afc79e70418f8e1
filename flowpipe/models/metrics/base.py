"""``Metrics``: the one ``evaluate(names, agg=...)`` of every metrics kind, and the helpers they share.

A metric is a method of the kind's class (or an alias of one); ``evaluate`` calls it with the remaining keywords
and reduces its first axis (batches, items or outputs, by kind) with the aggregation ``agg`` names. A value of
one element comes back as a Python float.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

__all__ = ['Metrics', 'infmean', 'to_numpy']


def to_numpy(values: Any) -> np.ndarray:
    """``values`` as a numpy array: torch tensors (on any device, with or without grad) and lists alike."""
    if hasattr(values, 'detach') and hasattr(values, 'cpu'):
        values = values.detach().cpu()
        if str(values.dtype) == 'torch.bfloat16':
            values = values.float()
        values = values.numpy()
    return np.asarray(values)


def infmean(values: Any, axis: int = 0) -> np.ndarray:
    """The mean along ``axis`` of the finite values only; ``inf`` where none is finite (an undefined metric)."""
    values = np.asarray(values, dtype=float)
    finite = np.isfinite(values)
    count = finite.sum(axis=axis)
    total = np.where(finite, values, 0.0).sum(axis=axis)
    return np.divide(total, count, out=np.full(np.shape(total), np.inf), where=count > 0)


def squeeze(value: Any) -> Any:
    """Drop axes of length 1; a single value becomes a Python float (an int for counts)."""
    value = np.squeeze(np.asarray(value))
    return value.item() if value.ndim == 0 else value


class Metrics:
    """The base of the metrics kinds: ``evaluate`` by name, aliases and aggregations.

    A subclass sets ``ALIASES`` (``{'iou': 'jaccard', ...}``) and ``AGGREGATIONS`` (``{'mean': fn}``, applied to
    a metric's values along their first axis; ``agg=None`` keeps them as they are).
    """

    ALIASES: Mapping[str, str] = {}
    AGGREGATIONS: Mapping[str, Callable[[Any], Any]] = {'mean': lambda values: infmean(values, axis=0)}
    # names that are not metrics although they are public methods
    NOT_METRICS = frozenset({'evaluate', 'update', 'append', 'copy', 'plot_confusion_matrix', 'metric_names'})

    def evaluate(self, metrics: str | Sequence[str], agg: str | None = 'mean', *args: Any, **kwargs: Any) -> Any:
        """The value of ``metrics`` (a name, or a list of names: then a dict by name), aggregated by ``agg``.

        Positional and keyword arguments after ``agg`` go to each metric (``multiclass=``, ``label=``, ...).
        """
        if agg is not None and agg not in self.AGGREGATIONS:
            raise ValueError(f"Expected agg among {sorted(self.AGGREGATIONS)} or None. Received: agg={agg!r}")
        names = [metrics] if isinstance(metrics, str) else list(metrics)
        values = {}
        for name in names:
            value = self.metric(name)(*args, **kwargs)
            if agg is not None and not np.isscalar(value):
                value = self.AGGREGATIONS[agg](value)
            values[name] = squeeze(value)
        return values[metrics] if isinstance(metrics, str) else values

    def metric(self, name: str) -> Callable[..., Any]:
        """The method that computes metric ``name`` (an alias resolved)."""
        method = self.ALIASES.get(name, name)
        if method.startswith('_') or method in self.NOT_METRICS or not callable(getattr(self, method, None)):
            raise ValueError(f"Expected a metric of {type(self).__name__} among {self.metric_names()}. "
                             f"Received: {name!r}")
        return getattr(self, method)

    @classmethod
    def metric_names(cls) -> list[str]:
        """Every metric's name and alias."""
        methods = {name for name in dir(cls) if not name.startswith('_') and name not in cls.NOT_METRICS
                   and callable(getattr(cls, name)) and name != 'metric'}
        return sorted(methods | set(cls.ALIASES))

    def __getattr__(self, name: str) -> Any:
        # batchflow's metrics answer to their aliases as attributes too: metrics.iou(), metrics.tpr()
        aliases = type(self).ALIASES
        if name in aliases:
            return getattr(self, aliases[name])
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
