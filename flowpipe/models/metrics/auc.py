"""``roc_auc_score`` and ``roc_curve``: the exact area under the ROC curve, ties counted as half.

The area is the probability that a random positive scores above a random negative (a tie counts 1/2), computed
from the average ranks of the scores (the Mann-Whitney U statistic): one sort, no threshold grid, no
approximation. Inputs may be numpy arrays or torch tensors.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import to_numpy

__all__ = ['roc_auc_score', 'roc_curve']


def _ranks(scores: np.ndarray) -> np.ndarray:
    """The rank of every score from 1, tied scores sharing their average rank."""
    order = np.argsort(scores, kind='stable')
    ordered = scores[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(ordered)]
    average = (starts + ends + 1) / 2.0                    # mean of the ranks starts+1 .. ends
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat(average, ends - starts)
    return ranks


def _binary_auc(positive: np.ndarray, scores: np.ndarray) -> float:
    positives = int(positive.sum())
    negatives = len(positive) - positives
    if positives == 0 or negatives == 0:
        return float('nan')
    rank_sum = _ranks(scores)[positive].sum()
    return float((rank_sum - positives * (positives + 1) / 2) / (positives * negatives))


def roc_auc_score(targets: Any, scores: Any, axis: int | None = None, multiclass: str | None = 'macro') -> Any:
    """The area under the ROC curve.

    Args:
        targets: labels: 0/1 (binary) or class numbers (with ``axis``).
        scores: for a binary task, one score per item (a probability, a logit: any monotone score); for ``K``
            classes, ``K`` scores per item along ``axis`` (one-vs-rest).
        axis: the class axis of ``scores``; ``None`` for a binary task.
        multiclass: ``'macro'`` (the mean over classes present with both outcomes), ``'weighted'`` (weighted by
            each class's count) or ``None`` (one area per class, ``nan`` where a class is absent or everywhere).
    """
    targets, scores = to_numpy(targets), to_numpy(scores).astype(float)
    if axis is None:
        if targets.shape != scores.shape or not np.isin(targets, (0, 1)).all():
            raise ValueError(f"Expected 0/1 targets of the shape of the scores for a binary ROC AUC (or axis= for "
                             f"class scores). Received shapes {targets.shape} and {scores.shape}")
        value = _binary_auc(targets.ravel().astype(bool), scores.ravel())
        if np.isnan(value):
            raise ValueError("Expected both classes among the targets (ROC AUC is undefined otherwise). Received: "
                             f"only {np.unique(targets).tolist()}")
        return value
    scores = np.moveaxis(scores, axis, -1)
    classes = scores.shape[-1]
    if targets.shape != scores.shape[:-1]:
        raise ValueError(f"Expected labels of the shape of the scores without the class axis. Received shapes "
                         f"{targets.shape} and {np.moveaxis(scores, -1, axis).shape} with axis={axis}")
    targets, scores = targets.ravel(), scores.reshape(-1, classes)
    areas = np.array([_binary_auc(targets == label, scores[:, label]) for label in range(classes)])
    if multiclass is None:
        return areas
    defined = ~np.isnan(areas)
    if not defined.any():
        raise ValueError("Expected a class with both outcomes among the targets. Received: one class only")
    if multiclass == 'macro':
        return float(areas[defined].mean())
    if multiclass == 'weighted':
        counts = np.bincount(targets.astype(np.int64), minlength=classes)[defined]
        return float(np.average(areas[defined], weights=counts))
    raise ValueError(f"Expected multiclass 'macro', 'weighted' or None. Received: multiclass={multiclass!r}")


def roc_curve(targets: Any, scores: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ROC curve of a binary task: ``(false positive rates, true positive rates, thresholds)``, one point per
    distinct score from the highest (``scores >= threshold`` predicted positive), after a first point (0, 0)."""
    targets, scores = to_numpy(targets).ravel().astype(bool), to_numpy(scores).ravel().astype(float)
    if targets.all() or not targets.any():
        raise ValueError("Expected both classes among the targets (the ROC curve is undefined otherwise).")
    order = np.argsort(-scores, kind='stable')
    ordered, hits = scores[order], targets[order]
    last = np.r_[ordered[1:] != ordered[:-1], True]          # the last position of each distinct score
    true_positives = np.cumsum(hits)[last]
    false_positives = np.cumsum(~hits)[last]
    tpr = np.r_[0.0, true_positives / targets.sum()]
    fpr = np.r_[0.0, false_positives / (~targets).sum()]
    return fpr, tpr, np.r_[np.inf, ordered[last]]
