"""``ClassificationMetrics``: confusion matrices gathered batch by batch, and the rates computed from them.

The matrix is laid out as batchflow lays it: ``confusion[predicted, actual]``. Targets and predictions of one
item each (vectors) pool into one matrix; items that hold many values each (masks) keep one matrix per item, and
``evaluate(..., agg='mean')`` averages over items. Gathering more batches with ``update`` adds them in, so a
variable ``V('metrics', mode='u')`` ends the run holding the metrics of every batch.

Undefined values follow batchflow: a rate whose denominator is 0 takes the value its name implies for an empty
class (recall and precision 1, fall-out 0, ...); a likelihood ratio over a zero rate is ``inf`` (or 0 when its
numerator is 0 too); the F1 score and IoU of a class absent from both targets and predictions are ``inf``, and
``inf`` values are left out of the class average (``multiclass='macro'``) and of ``agg='mean'``.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

import numpy as np

from .base import Metrics, infmean, to_numpy

__all__ = ['ClassificationMetrics', 'METRIC_ALIASES']

METRIC_ALIASES = {'sensitivity': 'true_positive_rate', 'recall': 'true_positive_rate', 'tpr': 'true_positive_rate',
                  'fallout': 'false_positive_rate', 'fpr': 'false_positive_rate', 'miss_rate': 'false_negative_rate',
                  'fnr': 'false_negative_rate', 'specificity': 'true_negative_rate', 'tnr': 'true_negative_rate',
                  'acc': 'accuracy', 'precision': 'positive_predictive_value', 'ppv': 'positive_predictive_value',
                  'fdr': 'false_discovery_rate', 'for': 'false_omission_rate', 'npv': 'negative_predictive_value',
                  'prv': 'prevalence', 'plr': 'positive_likelihood_ratio', 'nlr': 'negative_likelihood_ratio',
                  'dor': 'diagnostics_odds_ratio', 'dice': 'f1_score', 'f1s': 'f1_score', 'iou': 'jaccard',
                  'jac': 'jaccard'}
_MULTICLASS = (None, 'micro', 'macro', 'mean')


def _count_method(column: str, what: str) -> Callable[..., Any]:
    def count(self: ClassificationMetrics, label: Any = None, **kwargs: Any) -> Any:
        return self._count(column, label)
    count.__doc__ = (f"{what} per item and class (``label``: one class or a list; by default the reported "
                     "classes).")
    return count


def _rate_method(top: str, bottom: str, empty: tuple[float, float], doc: str) -> Callable[..., Any]:
    def rate(self: ClassificationMetrics, label: Any = None, multiclass: str | None = 'macro',
             when_zero: tuple[float, float] = empty, **kwargs: Any) -> np.ndarray:
        return self._rate(top, bottom, when_zero, label, multiclass)
    rate.__doc__ = doc + " ``when_zero``: the values where the denominator is 0 (numerator > 0, numerator 0)."
    return rate


class ClassificationMetrics(Metrics):
    """Metrics of a classifier (or a pixel-wise segmenter) on the items gathered so far.

    Args:
        targets: true labels, or probabilities/logits in the layout of ``predictions``.
        predictions: labels (``fmt='labels'``), probabilities (``'proba'``) or logits (``'logits'``); numpy
            arrays or torch tensors.
        fmt: the form of ``predictions``.
        num_classes: the number of classes (from ``predictions.shape[axis]`` when ``axis`` is given, else 2).
        axis: the class axis of probabilities or logits.
        threshold: for a binary task given one probability per value: values ``>= threshold`` are class 1
            (logits: ``sigmoid(logit) >= threshold``).
        skip_bg: leave class 0 (background) out of the per-class rates.

    ``evaluate(names, agg='mean', multiclass='macro')``: ``multiclass`` is ``'macro'`` (mean over classes),
    ``'micro'`` (pooled counts) or ``None`` (one value per class); a binary task reports class 1.
    """

    ALIASES = METRIC_ALIASES

    def __init__(self, targets: Any, predictions: Any, fmt: str = 'proba', num_classes: int | None = None,
                 axis: int | None = None, threshold: float = 0.5, skip_bg: bool = False):
        if fmt not in ('proba', 'logits', 'labels'):
            raise ValueError(f"Expected fmt 'proba', 'logits' or 'labels'. Received: fmt={fmt!r}")
        predictions, targets = to_numpy(predictions), to_numpy(targets)
        self.num_classes = int(predictions.shape[axis]) if axis is not None else int(num_classes or 2)
        self.skip_bg = skip_bg
        if fmt != 'labels' and axis is None and self.num_classes > 2:
            raise ValueError("Expected axis= (the class axis) for probabilities or logits of more than 2 classes. "
                             "Received: axis=None")
        targets, predictions = _as_labels(targets, predictions, fmt, axis, threshold)
        self.pooled = targets.ndim <= 1
        if self.pooled:
            targets, predictions = targets.reshape(1, -1), predictions.reshape(1, -1)
        _check_labels(targets, predictions, self.num_classes)
        self._confusion_matrix = self._matrices(targets, predictions)

    def _matrices(self, targets: np.ndarray, predictions: np.ndarray) -> np.ndarray:
        """One ``[predicted, actual]`` count matrix per item (first axis of the label arrays)."""
        classes = self.num_classes
        targets, predictions = targets.reshape(len(targets), -1), predictions.reshape(len(predictions), -1)
        items = np.arange(len(targets))[:, None] * classes * classes
        flat = (items + predictions.astype(np.int64) * classes + targets.astype(np.int64)).ravel()
        counts = np.bincount(flat, minlength=len(targets) * classes * classes)
        return counts.reshape(len(targets), classes, classes)

    # gathering

    def update(self, other: ClassificationMetrics) -> ClassificationMetrics:
        """Add ``other``'s items (``V('metrics', mode='u')`` calls this); returns ``self``."""
        self._check_same(other)
        if self.pooled and other.pooled:
            self._confusion_matrix = self._confusion_matrix + other._confusion_matrix
        else:
            self._confusion_matrix = np.concatenate([self._confusion_matrix, other._confusion_matrix])
            self.pooled = False
        return self

    def append(self, other: ClassificationMetrics) -> ClassificationMetrics:
        """Keep ``other``'s matrices beside these (one per batch, averaged by ``agg='mean'``)."""
        self._check_same(other)
        self._confusion_matrix = np.concatenate([self._confusion_matrix, other._confusion_matrix])
        self.pooled = False
        return self

    def _check_same(self, other: Any) -> None:
        if not isinstance(other, ClassificationMetrics) or other.num_classes != self.num_classes:
            raise ValueError(f"Expected {type(self).__name__} of {self.num_classes} classes to gather. Received: "
                             f"{other!r}. Gather one kind of metrics with one num_classes into a variable.")

    def copy(self) -> ClassificationMetrics:
        """A copy that gathers on its own."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._confusion_matrix = self._confusion_matrix.copy()
        return new

    def __getitem__(self, item: Any) -> ClassificationMetrics:
        """The metrics of some of the items (``metrics[:10]``, ``metrics[[0, 3]]``)."""
        new = self.copy()
        matrices = self._confusion_matrix
        new._confusion_matrix = np.asarray(matrices[item]).reshape(-1, *matrices.shape[1:])
        return new

    @property
    def confusion_matrix(self) -> np.ndarray:
        """``confusion[predicted, actual]`` counts over every gathered item."""
        return self._confusion_matrix.sum(axis=0)

    # counts: one column per class, one row per item

    def _table(self) -> dict[str, np.ndarray]:
        """Per item and class: true positives, condition and prediction positives, the total."""
        matrices = self._confusion_matrix
        total = matrices.sum(axis=(1, 2))[:, None] + np.zeros(self.num_classes, dtype=matrices.dtype)
        return {'tp': np.diagonal(matrices, axis1=1, axis2=2), 'pp': matrices.sum(axis=2),
                'cp': matrices.sum(axis=1), 'total': total}

    def _column(self, name: str) -> np.ndarray:
        table = self._table()
        derived = {'fp': ('pp', 'tp'), 'fn': ('cp', 'tp'), 'cn': ('total', 'cp'), 'pn': ('total', 'pp')}
        if name in table:
            return table[name]
        if name in derived:
            return table[derived[name][0]] - table[derived[name][1]]
        return self._column('cn') - self._column('fp')          # 'tn'

    def _labels(self, label: Any = None) -> list[int]:
        if label is not None:
            return [int(label)] if np.isscalar(label) else [int(value) for value in label]
        if self.num_classes == 2:
            return [1]
        return list(range(1 if self.skip_bg else 0, self.num_classes))

    def _count(self, name: str, label: Any) -> Any:
        values = self._column(name)[:, self._labels(label)]
        if values.shape[1] == 1:
            values = values[:, 0]
        return values[0] if len(values) == 1 else values

    true_positive = _count_method('tp', 'True positives')
    false_positive = _count_method('fp', 'False positives')
    true_negative = _count_method('tn', 'True negatives')
    false_negative = _count_method('fn', 'False negatives')
    condition_positive = _count_method('cp', 'Target values of the class')
    condition_negative = _count_method('cn', 'Target values of other classes')
    prediction_positive = _count_method('pp', 'Values predicted the class')
    prediction_negative = _count_method('pn', 'Values predicted another class')

    def total_population(self, *args: Any, **kwargs: Any) -> Any:
        """The number of values per item."""
        total = self._column('total')[:, 0]
        return total[0] if len(total) == 1 else total

    # rates

    def _fraction(self, top: np.ndarray, bottom: np.ndarray, label: Any, multiclass: str | None,
                  when_zero: tuple[float, float]) -> np.ndarray:
        """``top / bottom`` over the chosen classes, averaged as ``multiclass`` says; where ``bottom`` is 0:
        ``when_zero[0]`` if ``top > 0`` else ``when_zero[1]``."""
        if multiclass not in _MULTICLASS:
            raise ValueError(f"Expected multiclass 'macro', 'micro' or None. Received: multiclass={multiclass!r}")
        labels = self._labels(label)
        top, bottom = top[:, labels].astype(float), bottom[:, labels].astype(float)
        if multiclass == 'micro':
            top, bottom = top.sum(axis=1, keepdims=True), bottom.sum(axis=1, keepdims=True)
        value = np.divide(top, bottom, out=np.where(top > 0, *map(float, when_zero)), where=bottom > 0)
        if multiclass in ('macro', 'mean'):
            return infmean(value, axis=1)[:, None]
        return value[:, 0] if value.shape[1] == 1 else value

    def _rate(self, top: str, bottom: str, when_zero: tuple[float, float], label: Any = None,
              multiclass: str | None = 'macro') -> np.ndarray:
        return self._fraction(self._column(top), self._column(bottom), label, multiclass, when_zero)

    def _per_class(self, top: str, bottom: str, when_zero: tuple[float, float]) -> np.ndarray:
        """The rate of every class, one column each."""
        return self._fraction(self._column(top), self._column(bottom), range(self.num_classes), None, when_zero)

    true_positive_rate = _rate_method('tp', 'cp', (0, 1), 'Recall, sensitivity: ``tp / (tp + fn)``.')
    false_positive_rate = _rate_method('fp', 'cn', (1, 0), 'Fall-out: ``fp / (fp + tn)``.')
    false_negative_rate = _rate_method('fn', 'cp', (1, 0), 'Miss rate: ``fn / (tp + fn)``.')
    true_negative_rate = _rate_method('tn', 'cn', (0, 1), 'Specificity: ``tn / (tn + fp)``.')
    prevalence = _rate_method('cp', 'total', (0, 0), 'The share of values of the class: ``(tp + fn) / total``.')
    positive_predictive_value = _rate_method('tp', 'pp', (0, 1), 'Precision: ``tp / (tp + fp)``.')
    false_discovery_rate = _rate_method('fp', 'pp', (1, 0), '``fp / (tp + fp)``.')
    false_omission_rate = _rate_method('fn', 'pn', (1, 0), '``fn / (fn + tn)``.')
    negative_predictive_value = _rate_method('tn', 'pn', (0, 1), '``tn / (fn + tn)``.')

    def positive_likelihood_ratio(self, label: Any = None, multiclass: str | None = 'macro',
                                  when_zero=(np.inf, 0), **kwargs: Any) -> np.ndarray:
        """``tpr / fpr``."""
        return self._fraction(self._per_class('tp', 'cp', (0, 1)), self._per_class('fp', 'cn', (1, 0)), label,
                              multiclass, when_zero)

    def negative_likelihood_ratio(self, label: Any = None, multiclass: str | None = 'macro',
                                  when_zero=(np.inf, 0), **kwargs: Any) -> np.ndarray:
        """``fnr / tnr``."""
        return self._fraction(self._per_class('fn', 'cp', (1, 0)), self._per_class('tn', 'cn', (0, 1)), label,
                              multiclass, when_zero)

    def diagnostics_odds_ratio(self, label: Any = None, multiclass: str | None = 'macro',
                               when_zero=(np.inf, 0), **kwargs: Any) -> np.ndarray:
        """``plr / nlr``."""
        every = range(self.num_classes)
        plr, nlr = self.positive_likelihood_ratio(every, None), self.negative_likelihood_ratio(every, None)
        return self._fraction(plr, nlr, label, multiclass, when_zero)

    def accuracy(self, **kwargs: Any) -> np.ndarray:
        """The share of values whose predicted class is right (classes left out by ``skip_bg`` do not count)."""
        right = self._column('tp')[:, 1 if self.skip_bg else 0:].sum(axis=1)
        return right / self._column('total')[:, 0]

    def f1_score(self, label: Any = None, multiclass: str | None = 'macro', **kwargs: Any) -> np.ndarray:
        """``2 * precision * recall / (precision + recall)`` (the Dice coefficient); with ``multiclass='macro'``,
        of the class-averaged precision and recall. ``inf`` where the class is in neither input."""
        recall = self.true_positive_rate(label, multiclass, when_zero=(0, np.inf))
        precision = self.positive_predictive_value(label, multiclass, when_zero=(0, np.inf))
        with np.errstate(invalid='ignore', divide='ignore'):
            value = 2 * precision * recall / (precision + recall)
        return np.where(np.isinf(recall) & np.isinf(precision), np.inf, np.where(np.isfinite(value), value, 0.0))

    def jaccard(self, label: Any = None, multiclass: str | None = 'macro', **kwargs: Any) -> np.ndarray:
        """Intersection over union, ``dice / (2 - dice)``; ``inf`` where the class is in neither input."""
        dice = self.f1_score(label, multiclass)
        with np.errstate(invalid='ignore'):
            return np.where(np.isinf(dice), np.inf, dice / (2 - dice))

    def plot_confusion_matrix(self, classes: Sequence[str] | None = None, normalize: bool = False,
                              path: str | os.PathLike | None = None, ax: Any = None, xtick_rotation: float = 90,
                              **kwargs: Any) -> Any:
        """Draw the confusion matrix with matplotlib (columns: actual class, rows: predicted), each cell's count
        (or share of its actual class, ``normalize=True``) written in it; returns the axes.

        ``path`` saves the figure to a file (in a script, where matplotlib shows nothing: a warning says so);
        ``ax`` draws on given axes; ``figsize`` is a new figure's size; other keywords are ``plot``'s parameters
        of its ``'matrix'`` mode (``cmap``, ``colorbar``, ``label_format``...).
        """
        from .plots import plot_matrix
        matrix = self.confusion_matrix.astype(float)
        if normalize:
            matrix = matrix / np.maximum(matrix.sum(axis=0, keepdims=True), 1)
        return plot_matrix(matrix, classes, normalize, path, ax, xtick_rotation, caller=type(self).__name__,
                           **kwargs)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.num_classes} classes, {int(self._confusion_matrix.sum())} values, "
                f"accuracy={self.evaluate('accuracy'):.4g})")


def _as_labels(targets: np.ndarray, predictions: np.ndarray, fmt: str, axis: int | None,
               threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """Targets and predictions as label arrays of one shape."""
    if targets.ndim == predictions.ndim:
        if axis is not None or (fmt == 'proba' and targets.dtype.kind == 'f'):
            targets = _labels(targets, fmt, axis, threshold)
    elif not (targets.ndim == predictions.ndim - 1 and fmt != 'labels' and axis is not None):
        raise ValueError(f"Expected targets of the shape of predictions, or labels without the class axis of "
                         f"probabilities/logits (fmt='proba' or 'logits' and axis=). Received shapes "
                         f"{targets.shape} and {predictions.shape} with fmt={fmt!r}, axis={axis!r}")
    predictions = _labels(predictions, fmt, axis, threshold)
    if targets.shape != predictions.shape:
        raise ValueError(f"Expected targets and predictions of one shape (labels). Received shapes "
                         f"{targets.shape} and {predictions.shape}")
    return targets, predictions


def _labels(values: np.ndarray, fmt: str, axis: int | None, threshold: float) -> np.ndarray:
    if fmt == 'labels':
        return values.astype(np.int64)
    if axis is not None:
        return values.argmax(axis=axis)
    if not 0 < threshold < 1:
        raise ValueError(f"Expected a threshold between 0 and 1 (a probability). Received: threshold={threshold!r}")
    boundary = threshold if fmt == 'proba' else np.log(threshold / (1 - threshold))
    return (values >= boundary).astype(np.int64)


def _check_labels(targets: np.ndarray, predictions: np.ndarray, num_classes: int) -> None:
    bad = (targets < 0) | (targets >= num_classes) | (predictions < 0) | (predictions >= num_classes)
    if bad.any():
        raise ValueError(f"Expected labels in 0..{num_classes - 1}. Received targets {np.unique(targets[bad])} "
                         f"or predictions {np.unique(predictions[bad])} outside; set num_classes")
