"""``RegressionMetrics``: errors of a regression model, per output, weighted per sample if asked.

Targets and predictions are ``(samples,)`` or, with ``multi=True``, ``(samples, outputs)``; a list of batches
(what ``V('targets', mode='a')`` gathers) is joined along samples. ``evaluate(name, agg=None)`` gives one value
per output, ``agg='mean'`` their mean. Gathering more batches with ``update`` joins their samples.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Metrics, to_numpy

__all__ = ['RegressionMetrics']


class RegressionMetrics(Metrics):
    """Metrics of a regression model.

    Args:
        targets: true values: ``(samples,)``, ``(samples, outputs)`` with ``multi=True``, or a list of batches.
        predictions: predicted values of the same layout.
        weights: a weight per sample (for every metric but the median and maximum error and accuracy).
        multi: whether each sample has several outputs (a 2-D array is then one batch, not a list of batches).
        gap: the default ``gap`` of ``accuracy``.
    """

    ALIASES = {'mae': 'mean_absolute_error', 'mse': 'mean_squared_error', 'rmse': 'root_mean_squared_error',
               'r2': 'r2_score', 'acc': 'accuracy'}
    AGGREGATIONS = {'mean': np.mean}

    def __init__(self, targets: Any, predictions: Any, weights: Any = None, multi: bool = False, gap: float = 3):
        self.multi, self.gap = multi, gap
        self.targets, self.predictions = _samples(targets, multi), _samples(predictions, multi)
        if self.targets.shape != self.predictions.shape:
            raise ValueError(f"Expected targets and predictions of one shape. Received shapes {self.targets.shape} "
                             f"and {self.predictions.shape}")
        self.weights = None if weights is None else to_numpy(weights).astype(float).ravel()
        if self.weights is not None and len(self.weights) != len(self.targets):
            raise ValueError(f"Expected one weight per sample ({len(self.targets)}). Received: "
                             f"{len(self.weights)} weights")

    def update(self, other: RegressionMetrics) -> RegressionMetrics:
        """Join ``other``'s samples to these (``V('metrics', mode='u')`` calls this); returns ``self``."""
        if not isinstance(other, RegressionMetrics) or (self.weights is None) != (other.weights is None):
            raise ValueError(f"Expected RegressionMetrics, weighted if these are, to gather. Received: {other!r}")
        self.targets = np.concatenate([self.targets, other.targets])
        self.predictions = np.concatenate([self.predictions, other.predictions])
        if self.weights is not None:
            self.weights = np.concatenate([self.weights, other.weights])
        return self

    append = update

    def copy(self) -> RegressionMetrics:
        """A copy that gathers on its own."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def _errors(self) -> np.ndarray:
        return self.predictions - self.targets

    def _average(self, values: np.ndarray) -> np.ndarray:
        return np.average(values, axis=0, weights=self.weights)

    def mean_absolute_error(self, **kwargs: Any) -> np.ndarray:
        return self._average(np.abs(self._errors()))

    def mean_squared_error(self, **kwargs: Any) -> np.ndarray:
        return self._average(self._errors() ** 2)

    def root_mean_squared_error(self, **kwargs: Any) -> np.ndarray:
        return np.sqrt(self.mean_squared_error())

    def median_absolute_error(self, **kwargs: Any) -> np.ndarray:
        return np.median(np.abs(self._errors()), axis=0)

    def max_error(self, **kwargs: Any) -> np.ndarray:
        return np.max(np.abs(self._errors()), axis=0)

    def r2_score(self, **kwargs: Any) -> np.ndarray:
        """``1 - SS_res / SS_tot`` (weighted); ``-inf`` for constant targets missed, ``nan`` for constant ones
        hit exactly."""
        spread = self.targets - self._average(self.targets)
        with np.errstate(divide='ignore', invalid='ignore'):
            return 1 - self._average(self._errors() ** 2) / self._average(spread ** 2)

    def explained_variance_ratio(self, **kwargs: Any) -> np.ndarray:
        """``1 - Var(error) / Var(targets)`` (weighted)."""
        errors, spread = self._errors(), self.targets - self._average(self.targets)
        with np.errstate(divide='ignore', invalid='ignore'):
            return 1 - self._average((errors - self._average(errors)) ** 2) / self._average(spread ** 2)

    def accuracy(self, gap: float | None = None, **kwargs: Any) -> np.ndarray:
        """The share of samples predicted closer than ``gap`` to their target."""
        gap = self.gap if gap is None else gap
        return np.mean(np.abs(self._errors()) < gap, axis=0)

    def __repr__(self) -> str:
        return f"RegressionMetrics({len(self.targets)} samples, mae={self.evaluate('mae'):.4g})"


def _samples(values: Any, multi: bool) -> np.ndarray:
    """``values`` as ``(samples,)`` or ``(samples, outputs)``: a scalar (or one multi-output sample) as one
    sample, a list of batches joined."""
    if isinstance(values, (list, tuple)) and values and np.ndim(values[0]) >= (2 if multi else 1):
        return np.concatenate([to_numpy(value) for value in values]).astype(float)
    values = to_numpy(values).astype(float)
    if values.ndim == 0 or (values.ndim == 1 and multi):
        return values[None]
    if values.ndim > (2 if multi else 1):
        return values.reshape(-1, *values.shape[2:])
    return values
