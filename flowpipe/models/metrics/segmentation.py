"""Segmentation metrics: ``SegmentationMetricsByPixels`` (every pixel a classified value) and
``SegmentationMetricsByInstances`` (every connected region of a class an object found or missed).

By pixels, each item (mask) keeps its own confusion matrix: ``evaluate(name, agg=None, multiclass=None)`` gives
``(items, classes)``, ``agg='mean'`` averages over items, ``multiclass='macro'``/``'micro'`` over classes.

By instances, each target region of class ``k`` (connected through faces, as ``scipy.ndimage.label`` connects by
default) is a true positive when at least ``iot`` of its pixels are predicted ``k``, else a false negative; each
predicted region of class ``k`` that covers no target pixel of ``k`` is a false positive. True negatives do not
exist, so the rates built on them raise ``ValueError``. Background (class 0) has no instances.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .classification import ClassificationMetrics

__all__ = ['SegmentationMetricsByInstances', 'SegmentationMetricsByPixels', 'connected_components']


class SegmentationMetricsByPixels(ClassificationMetrics):
    """Pixel-wise metrics of a segmentation model; arguments as :class:`ClassificationMetrics`, whose masks (items
    of more than one value) keep one matrix per item."""


class SegmentationMetricsByInstances(ClassificationMetrics):
    """Metrics of the objects (connected regions of one class) a segmentation model finds.

    Args:
        targets, predictions, fmt, num_classes, axis, threshold: as :class:`ClassificationMetrics`.
        skip_bg: accepted for batchflow's signature; background never has instances.
        iot: the share of a target region's pixels that must be predicted its class for it to count as found.

    ``confusion_matrix`` has shape ``(classes - 1, 2, 2)``: per class from 1, ``[predicted, actual]`` counts of
    instances (``[1, 1]`` found, ``[0, 1]`` missed, ``[1, 0]`` false alarms).
    """

    def __init__(self, targets: Any, predictions: Any, fmt: str = 'proba', num_classes: int | None = None,
                 axis: int | None = None, skip_bg: bool = True, threshold: float = 0.5, iot: float = 0.5):
        if not 0 < iot <= 1:
            raise ValueError(f"Expected iot in (0, 1] (the share of a target instance to find). Received: iot={iot!r}")
        self.iot = iot
        super().__init__(targets, predictions, fmt, num_classes, axis, threshold, skip_bg=True)

    def _matrices(self, targets: np.ndarray, predictions: np.ndarray) -> np.ndarray:
        """Per item and class from 1: ``[[0, missed], [false alarms, found]]``."""
        matrices = np.zeros((len(targets), self.num_classes - 1, 2, 2), dtype=np.int64)
        for item, (target, predicted) in enumerate(zip(targets, predictions)):
            for label in range(1, self.num_classes):
                found, missed = _target_instances(target == label, predicted == label, self.iot)
                matrices[item, label - 1, 0, 1], matrices[item, label - 1, 1, 1] = missed, found
                matrices[item, label - 1, 1, 0] = _false_instances(predicted == label, target == label)
        return matrices

    def _table(self) -> dict[str, np.ndarray]:
        matrices = self._confusion_matrix
        empty = np.zeros((len(matrices), 1), dtype=matrices.dtype)
        return {'tp': np.concatenate([empty, matrices[:, :, 1, 1]], axis=1),
                'pp': np.concatenate([empty, matrices[:, :, 1].sum(axis=2)], axis=1),
                'cp': np.concatenate([empty, matrices[:, :, :, 1].sum(axis=2)], axis=1),
                'total': np.concatenate([empty, matrices.sum(axis=(2, 3))], axis=1)}

    def _column(self, name: str) -> np.ndarray:
        if name in ('tn', 'cn', 'pn'):
            raise ValueError("Expected a metric defined for instances (true negatives do not exist there). "
                             f"Received: a metric that needs {name!r}. Use tpr, ppv, fnr, fdr, f1_score or jaccard.")
        return super()._column(name)

    def _labels(self, label: Any = None) -> list[int]:
        labels = super()._labels(label) if label is not None else list(range(1, self.num_classes))
        if 0 in labels:
            raise ValueError(f"Expected instance classes from 1 (background has no instances). Received: "
                             f"label={label!r}")
        return labels

    def total_population(self, label: Any = None, **kwargs: Any) -> Any:
        """Target and false predicted instances per item and class."""
        return self._count('total', label)

    def accuracy(self, **kwargs: Any) -> np.ndarray:
        """The share of the instances (target or falsely predicted) that were found."""
        table = self._table()
        total = table['total'].sum(axis=1).astype(float)
        return np.divide(table['tp'].sum(axis=1), total, out=np.ones_like(total), where=total > 0)

    def plot_confusion_matrix(self, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("Expected pixel or classification metrics for plot_confusion_matrix. Received: "
                         "SegmentationMetricsByInstances, whose matrices are 2x2 per class. Use "
                         "SegmentationMetricsByPixels for a class-by-class matrix.")


def _target_instances(target: np.ndarray, predicted: np.ndarray, iot: float) -> tuple[int, int]:
    """How many target regions have at least ``iot`` of their pixels predicted (found), how many not (missed)."""
    regions, count = connected_components(target)
    if count == 0:
        return 0, 0
    sizes = np.bincount(regions.ravel(), minlength=count + 1)[1:]
    hits = np.bincount(regions.ravel(), weights=predicted.ravel(), minlength=count + 1)[1:]
    found = int(np.sum(hits >= iot * sizes))
    return found, count - found


def _false_instances(predicted: np.ndarray, target: np.ndarray) -> int:
    """How many predicted regions cover no target pixel of their class."""
    regions, count = connected_components(predicted)
    if count == 0:
        return 0
    covered = np.bincount(regions.ravel(), weights=target.ravel(), minlength=count + 1)[1:]
    return int(np.sum(covered == 0))


def connected_components(mask: np.ndarray) -> tuple[np.ndarray, int]:
    """Label the regions of ``mask``'s true values that touch through faces (not corners), in any number of
    dimensions: returns ``(labels, count)``, labels ``1..count`` in order of first pixel, 0 outside.

    Union by the smaller index over every pair of neighbouring true values, with pointer jumping between rounds:
    a few numpy passes whatever the regions' shapes.
    """
    mask = np.asarray(mask, dtype=bool)
    index = np.arange(mask.size).reshape(mask.shape)
    firsts, seconds = [], []
    for axis in range(mask.ndim):
        head = [slice(None)] * mask.ndim
        tail = [slice(None)] * mask.ndim
        head[axis], tail[axis] = slice(None, -1), slice(1, None)
        both = mask[tuple(head)] & mask[tuple(tail)]
        firsts.append(index[tuple(head)][both])
        seconds.append(index[tuple(tail)][both])
    first, second = np.concatenate(firsts), np.concatenate(seconds)
    parent = np.arange(mask.size)
    while True:
        root_first, root_second = parent[first], parent[second]
        differ = root_first != root_second
        if not differ.any():
            break
        low = np.minimum(root_first[differ], root_second[differ])
        high = np.maximum(root_first[differ], root_second[differ])
        np.minimum.at(parent, high, low)
        while True:
            jumped = parent[parent]
            if np.array_equal(jumped, parent):
                break
            parent = jumped
    roots = parent.reshape(mask.shape)[mask]
    unique, numbered = np.unique(roots, return_inverse=True)
    labels = np.zeros(mask.shape, dtype=np.int64)
    labels[mask] = numbered.ravel() + 1
    return labels, len(unique)
