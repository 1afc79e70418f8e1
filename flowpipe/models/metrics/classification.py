"""``ClassificationMetrics``: confusion matrices gathered batch by batch, and the rates computed from them.

The matrix is laid out as batchflow lays it: ``confusion[predicted, actual]``. Targets and predictions of one
item each (vectors) pool into one matrix; items that hold many values each (masks) keep one matrix per item, and
``evaluate(..., agg='mean')`` averages over items. Gathering more batches with ``update`` adds them in, so a
variable ``V('metrics', mode='u')`` ends the run holding the metrics of every batch.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

__all__ = ['ClassificationMetrics', 'METRIC_ALIASES']

METRIC_ALIASES = {'sensitivity': 'true_positive_rate', 'recall': 'true_positive_rate', 'tpr': 'true_positive_rate',
                  'fallout': 'false_positive_rate', 'fpr': 'false_positive_rate', 'miss_rate': 'false_negative_rate',
                  'fnr': 'false_negative_rate', 'specificity': 'true_negative_rate', 'tnr': 'true_negative_rate',
                  'acc': 'accuracy', 'precision': 'positive_predictive_value', 'ppv': 'positive_predictive_value',
                  'fdr': 'false_discovery_rate', 'for': 'false_omission_rate', 'npv': 'negative_predictive_value',
                  'prv': 'prevalence', 'dice': 'f1_score', 'f1s': 'f1_score', 'iou': 'jaccard'}

# rate name -> (numerator, denominator, value when the denominator is 0)
_RATES = {'true_positive_rate': ('tp', 'cp', 1.0), 'false_positive_rate': ('fp', 'cn', 0.0),
          'false_negative_rate': ('fn', 'cp', 0.0), 'true_negative_rate': ('tn', 'cn', 1.0),
          'positive_predictive_value': ('tp', 'pp', 1.0), 'false_discovery_rate': ('fp', 'pp', 0.0),
          'false_omission_rate': ('fn', 'pn', 0.0), 'negative_predictive_value': ('tn', 'pn', 1.0),
          'prevalence': ('cp', 'total', 0.0)}
_AGGREGATES = {'mean': lambda values: np.nanmean(values, axis=0), None: lambda values: values}


class ClassificationMetrics:
    """Metrics of a classifier on the items gathered so far.

    Args:
        targets: true labels, or probabilities/logits in the layout of ``predictions``.
        predictions: labels (``fmt='labels'``), probabilities (``'proba'``) or logits (``'logits'``).
        fmt: the form of ``predictions``.
        num_classes: the number of classes (from ``predictions.shape[axis]`` when ``axis`` is given, else 2).
        axis: the class axis of probabilities or logits.
        threshold: for a binary task given one probability (or logit) per value: the boundary of class 1.
        skip_bg: leave class 0 (background) out of the per-class rates.
    """

    def __init__(self, targets: Any, predictions: Any, fmt: str = 'proba', num_classes: int | None = None,
                 axis: int | None = None, threshold: float = 0.5, skip_bg: bool = False):
        if fmt not in ('proba', 'logits', 'labels'):
            raise ValueError(f"Expected fmt 'proba', 'logits' or 'labels'. Received: fmt={fmt!r}")
        predictions, targets = np.asarray(predictions), np.asarray(targets)
        self.num_classes = int(predictions.shape[axis]) if axis is not None else int(num_classes or 2)
        self.skip_bg = skip_bg
        if fmt != 'labels' and axis is None and self.num_classes > 2:
            raise ValueError("Expected axis= (the class axis) for probabilities or logits of more than 2 classes. "
                             "Received: axis=None")
        if targets.ndim == predictions.ndim and fmt != 'labels' and axis is not None:
            targets = _labels(targets, fmt, axis, threshold)
        predictions = _labels(predictions, fmt, axis, threshold)
        if targets.shape != predictions.shape:
            raise ValueError(f"Expected targets and predictions of one shape (labels). Received shapes "
                             f"{targets.shape} and {predictions.shape}")
        pooled = targets.ndim <= 1
        targets, predictions = targets.reshape(1 if pooled else len(targets), -1), predictions.reshape(
            1 if pooled else len(predictions), -1)
        self.pooled = pooled
        self._confusion = np.stack([_confusion(t, p, self.num_classes) for t, p in zip(targets, predictions)])

    # gathering

    def update(self, other: ClassificationMetrics) -> ClassificationMetrics:
        """Add ``other``'s items (``V('metrics', mode='u')`` calls this); returns ``self``."""
        if other.num_classes != self.num_classes:
            raise ValueError(f"Expected metrics of {self.num_classes} classes. Received {other.num_classes}")
        if self.pooled and other.pooled:
            self._confusion = self._confusion + other._confusion
        else:
            self._confusion = np.concatenate([self._confusion, other._confusion])
        return self

    def append(self, other: ClassificationMetrics) -> ClassificationMetrics:
        """Keep ``other``'s matrices beside these (one per batch, averaged by ``agg='mean'``)."""
        self._confusion = np.concatenate([self._confusion, other._confusion])
        self.pooled = False
        return self

    def copy(self) -> ClassificationMetrics:
        """A copy that gathers on its own."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._confusion = self._confusion.copy()
        return new

    @property
    def confusion_matrix(self) -> np.ndarray:
        """``confusion[predicted, actual]`` counts over every gathered item."""
        return self._confusion.sum(axis=0)

    # metrics

    def evaluate(self, metrics: str | Sequence[str], agg: str | None = 'mean', multiclass: str | None = 'macro',
                 **kwargs: Any) -> Any:
        """The value of ``metrics`` (a name or a list: then a dict by name).

        ``multiclass``: ``'macro'`` (mean over classes), ``'micro'`` (pooled counts) or ``None`` (one value per
        class); a binary task reports class 1. ``agg='mean'`` averages over per-item matrices (masks).
        """
        if agg not in _AGGREGATES:
            raise ValueError(f"Expected agg 'mean' or None. Received: agg={agg!r}")
        names = [metrics] if isinstance(metrics, str) else list(metrics)
        values = {name: _squeeze(_AGGREGATES[agg](self._metric(name)(multiclass=multiclass, **kwargs)))
                  for name in names}
        return values[metrics] if isinstance(metrics, str) else values

    def _metric(self, name: str) -> Callable:
        method = METRIC_ALIASES.get(name, name)
        if method in _RATES:
            return lambda multiclass='macro', **kwargs: self._rate(method, multiclass)
        if method in ('accuracy', 'f1_score', 'jaccard'):
            return getattr(self, method)
        known = sorted({*_RATES, 'accuracy', 'f1_score', 'jaccard', *METRIC_ALIASES})
        raise ValueError(f"Expected a metric among {known}. Received: {name!r}")

    def _counts(self) -> dict[str, np.ndarray]:
        """Per matrix and class: true/false positives and negatives, condition and prediction totals."""
        confusion = self._confusion
        tp = np.diagonal(confusion, axis1=1, axis2=2).astype(float)
        pp, cp = confusion.sum(axis=2).astype(float), confusion.sum(axis=1).astype(float)
        total = confusion.sum(axis=(1, 2)).astype(float)[:, None] + np.zeros_like(tp)
        counts = {'tp': tp, 'pp': pp, 'cp': cp, 'total': total, 'fp': pp - tp, 'fn': cp - tp}
        counts['cn'], counts['pn'] = total - cp, total - pp
        counts['tn'] = counts['cn'] - counts['fp']
        return counts

    def _classes(self) -> list[int]:
        if self.num_classes == 2:
            return [1]
        return list(range(1 if self.skip_bg else 0, self.num_classes))

    def _rate(self, name: str, multiclass: str | None) -> np.ndarray:
        numerator, denominator, empty = _RATES[name]
        counts, classes = self._counts(), self._classes()
        top, bottom = counts[numerator][:, classes], counts[denominator][:, classes]
        if multiclass == 'micro':
            top, bottom = top.sum(axis=1, keepdims=True), bottom.sum(axis=1, keepdims=True)
        value = np.divide(top, bottom, out=np.full_like(top, empty), where=bottom > 0)
        if multiclass in ('macro', 'mean'):
            return value.mean(axis=1)
        if multiclass not in (None, 'micro'):
            raise ValueError(f"Expected multiclass 'macro', 'micro' or None. Received: multiclass={multiclass!r}")
        return value

    def accuracy(self, **kwargs: Any) -> np.ndarray:
        """The share of items whose predicted class is right."""
        counts = self._counts()
        return counts['tp'].sum(axis=1) / counts['total'][:, 0]

    def f1_score(self, multiclass: str | None = 'macro', **kwargs: Any) -> np.ndarray:
        """``2 * precision * recall / (precision + recall)`` (the Dice coefficient); with ``multiclass='macro'``,
        of the class-averaged precision and recall (as batchflow computes it)."""
        recall = self._rate('true_positive_rate', multiclass)
        precision = self._rate('positive_predictive_value', multiclass)
        total = precision + recall
        return np.divide(2 * precision * recall, total, out=np.zeros_like(total), where=total > 0)

    def jaccard(self, multiclass: str | None = 'macro', **kwargs: Any) -> np.ndarray:
        """Intersection over union, ``dice / (2 - dice)``."""
        dice = self.f1_score(multiclass)
        return dice / (2 - dice)

    def plot_confusion_matrix(self, classes: Sequence[str] | None = None, normalize: bool = False,
                              xtick_rotation: float = 90, **kwargs: Any) -> Any:
        """Draw the confusion matrix with matplotlib (columns: actual class, rows: predicted); returns the axes."""
        from ...progress.plots import pyplot
        plt = pyplot('plot_confusion_matrix()')
        matrix = self.confusion_matrix.astype(float)
        if normalize:
            matrix = matrix / np.maximum(matrix.sum(axis=0, keepdims=True), 1)
        classes = list(range(self.num_classes)) if classes is None else list(classes)
        _, axes = plt.subplots(figsize=kwargs.pop('figsize', (8, 8)))
        axes.imshow(matrix, cmap=kwargs.pop('cmap', 'Blues'))
        axes.set(xticks=range(len(classes)), yticks=range(len(classes)), xlabel='Actual class',
                 ylabel='Predicted class', title='Normalized confusion matrix' if normalize else 'Confusion matrix')
        axes.set_xticklabels(classes, rotation=xtick_rotation)
        axes.set_yticklabels(classes)
        return axes

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.num_classes} classes, {int(self._confusion.sum())} values, "
                f"accuracy={self.evaluate('accuracy'):.4g})")


def _labels(values: np.ndarray, fmt: str, axis: int | None, threshold: float) -> np.ndarray:
    if fmt == 'labels':
        return values.astype(np.int64)
    if axis is not None:
        return values.argmax(axis=axis)
    boundary = threshold if fmt == 'proba' else np.log(threshold / (1 - threshold))
    return (values > boundary).astype(np.int64)


def _confusion(targets: np.ndarray, predictions: np.ndarray, num_classes: int) -> np.ndarray:
    bad = (targets < 0) | (targets >= num_classes) | (predictions < 0) | (predictions >= num_classes)
    if bad.any():
        raise ValueError(f"Expected labels in 0..{num_classes - 1}. Received targets {np.unique(targets[bad])} "
                         f"or predictions {np.unique(predictions[bad])} outside; set num_classes")
    flat = predictions.astype(np.int64) * num_classes + targets.astype(np.int64)
    return np.bincount(flat, minlength=num_classes ** 2).reshape(num_classes, num_classes)


def _squeeze(value: Any) -> Any:
    value = np.squeeze(np.asarray(value, dtype=float))
    return value.item() if value.ndim == 0 else value
