"""``Validate``'s metrics by name (``'accuracy'``, ``'top5'``, ``'loss'``, ...) and ``torchmetrics.Metric`` objects.

A metric named by a string reads the validation pipeline's variables after the run, by one convention:

- ``predictions``: what the model predicts, one entry per item (``save_to=V('predictions', mode='e')``): class
  scores (logits or probabilities, the class axis after the item axis, as torch lays them out) or labels;
- ``targets``: the true labels, one per item (``update(V('targets', mode='e'), B.labels)``);
- ``losses``: the loss of each validation batch (``fetches='loss', save_to=V('losses', mode='a')``).

``'accuracy'`` and ``'top<k>'`` are means over items; ``'loss'`` is the mean of the batch losses weighted by the
items of each batch (the mean over items when the model's loss is one over its batch's items, as torch's default
``reduction='mean'``); ``'precision'``, ``'recall'`` and ``'f1'`` are macro averages over the classes found among
predictions and targets (a class never predicted has precision 0); ``'auc'`` is the exact ROC AUC of the scores
(one-vs-rest, macro, over softmax probabilities for class scores). A ``torchmetrics.Metric`` is updated once per
validation batch with that batch's predictions and targets and computed at the end (its own sync across ranks).
"""
from __future__ import annotations

import re
import sys
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

PREDICTIONS, TARGETS, LOSSES = 'predictions', 'targets', 'losses'
NAMES = ('accuracy', 'top<k>', 'loss', 'precision', 'recall', 'f1', 'auc')
_TOP = re.compile(r'top([1-9][0-9]*)$')

_SAVE = {PREDICTIONS: "predict_model(..., fetches='predictions', save_to=V('predictions', mode='e'))",
         TARGETS: "update(V('targets', mode='e'), B.labels)",
         LOSSES: "predict_model(..., fetches='loss', save_to=V('losses', mode='a'))"}


def is_torchmetric(metric: Any) -> bool:
    """Whether ``metric`` is a ``torchmetrics.Metric`` (without importing torchmetrics where nothing did)."""
    module = sys.modules.get('torchmetrics')
    return module is not None and isinstance(metric, module.Metric)


def check_metrics(metrics: Any) -> dict[str, Any]:
    """``metrics=`` as ``{name: fn(pipeline) | built-in name | torchmetrics.Metric}``.

    A list names each entry by itself (a built-in name) or by its class (a ``Metric``); a dict by its keys.
    """
    if isinstance(metrics, Mapping):
        named = dict(metrics)
    elif isinstance(metrics, (list, tuple)):
        named = {_list_name(metric): metric for metric in metrics}
    else:
        named = None
    if not named or not all(isinstance(name, str) for name in named):
        raise TypeError(f"Expected metrics as a list of names ({', '.join(NAMES)}) or a dict {{name: fn(pipeline) "
                        f"-> float, a name or a torchmetrics.Metric}}, at least one. Received: metrics={metrics!r}")
    for name, metric in named.items():
        if isinstance(metric, str):
            builtin_kind(metric)
        elif not (is_torchmetric(metric) or callable(metric)):
            raise TypeError(f"Expected metric {name!r} as fn(pipeline) -> float, a built-in name or a "
                            f"torchmetrics.Metric. Received: {metric!r}")
    return named


def _list_name(metric: Any) -> str:
    if isinstance(metric, str):
        return metric
    if is_torchmetric(metric):
        return type(metric).__name__
    raise TypeError(f"Expected a list of metric names ({', '.join(NAMES)}) or torchmetrics.Metric objects. "
                    f"Received: {metric!r}. Name a function in a dict: metrics={{'name': fn}}.")


def builtin_kind(name: str) -> tuple[str, int]:
    """``(kind, k)`` of a built-in metric name; ``ValueError`` naming the known ones otherwise."""
    top = _TOP.match(name)
    if top:
        return 'top', int(top.group(1))
    if name in ('accuracy', 'loss', 'precision', 'recall', 'f1', 'auc'):
        return name, 1
    raise ValueError(f"Expected a built-in metric name: {', '.join(NAMES)}. Received: {name!r}. Pass a function "
                     f"fn(pipeline) -> float in a dict for any other metric.")


def compute_builtin(name: str, variables: Mapping[str, Any], sizes: Sequence[int]) -> float:
    """The value of built-in metric ``name`` from the validation variables and the run's batch sizes."""
    kind, k = builtin_kind(name)
    if kind == 'loss':
        return weighted_loss(_variable(variables, LOSSES, name), sizes)
    scores, targets = _scores_and_targets(variables, name)
    if targets.size == 0:
        return float('nan')
    if kind == 'auc':
        return _auc(scores, targets, variables)
    if kind == 'top':
        if scores is None:
            raise ValueError(f"Expected class scores (logits or probabilities) in variable 'predictions' for "
                             f"metric {name!r}. Received: labels, one per item. Save fetches='predictions' or "
                             f"'proba' rather than 'labels'.")
        order = np.argsort(-scores, axis=1, kind='stable')[:, :k]     # the first max first, as argmax
        return float(np.mean(np.any(order == targets[:, None], axis=1)))
    labels = _labels(variables, name) if scores is None else np.argmax(scores, axis=1)
    if kind == 'accuracy':
        return float(np.mean(labels == targets))
    return _macro(kind, labels, targets)


def weighted_loss(losses: Sequence[Any], sizes: Sequence[int]) -> float:
    """The mean of the batch losses weighted by the items of each batch."""
    if len(losses) != len(sizes):
        raise ValueError(f"Expected one loss per validation batch in variable 'losses' ({_SAVE[LOSSES]}). "
                         f"Received: {len(losses)} losses for {len(sizes)} batches. Save the batch's loss with "
                         f"mode='a', once per batch, into a variable that starts empty.")
    total = sum(sizes)
    return sum(float(loss) * size for loss, size in zip(losses, sizes)) / total if total else float('nan')


def _variable(variables: Mapping[str, Any], name: str, metric: str) -> Any:
    if name not in variables:
        raise ValueError(f"Expected the validation pipeline to save variable {name!r} for metric {metric!r}. "
                         f"Received: variables {sorted(variables)}. Add {_SAVE[name]} to the validation pipeline.")
    return variables[name]


def _scores_and_targets(variables: Mapping[str, Any], metric: str) -> tuple[np.ndarray | None, np.ndarray]:
    """Class scores as ``(values, classes)`` (``None`` for labels) and the targets flat, one per value."""
    predictions = np.asarray(_variable(variables, PREDICTIONS, metric))
    targets = np.asarray(_variable(variables, TARGETS, metric))
    if predictions.ndim == targets.ndim + 1 and predictions.ndim >= 2:
        classes = predictions.shape[1]
        return np.moveaxis(predictions, 1, -1).reshape(-1, classes), targets.reshape(-1)
    if predictions.shape != targets.shape:
        raise ValueError(f"Expected predictions as labels of the targets' shape, or class scores with one more "
                         f"axis (the classes, after the items). Received: predictions of shape {predictions.shape}, "
                         f"targets of shape {targets.shape}. Save one entry per item with mode='e'.")
    return None, targets.reshape(-1)


def _labels(variables: Mapping[str, Any], metric: str) -> np.ndarray:
    return np.asarray(_variable(variables, PREDICTIONS, metric)).reshape(-1)


def _macro(kind: str, labels: np.ndarray, targets: np.ndarray) -> float:
    """Macro precision, recall or f1 over the classes among ``labels`` and ``targets`` (0 where undefined)."""
    values = []
    for cls in np.union1d(labels, targets):
        predicted, actual = labels == cls, targets == cls
        hits = float(np.sum(predicted & actual))
        below = {'precision': np.sum(predicted), 'recall': np.sum(actual),
                 'f1': (np.sum(predicted) + np.sum(actual)) / 2}[kind]
        values.append(hits / float(below) if below else 0.0)
    return float(np.mean(values))


def _auc(scores: np.ndarray | None, targets: np.ndarray, variables: Mapping[str, Any]) -> float:
    """The exact ROC AUC: of one score per item (a binary task), else one-vs-rest over softmax probabilities
    (the scores as they are when they already are probabilities), macro-averaged; class 1's for two classes."""
    from ..models.metrics import roc_auc_score
    if scores is None:
        return roc_auc_score(targets, _labels(variables, 'auc').astype(float))
    scores = scores.astype(float)
    if not (np.all((scores >= 0) & (scores <= 1)) and np.allclose(scores.sum(axis=1), 1)):
        scores = np.exp(scores - scores.max(axis=1, keepdims=True))
        scores = scores / scores.sum(axis=1, keepdims=True)
    if scores.shape[1] == 2:
        return roc_auc_score(targets, scores[:, 1])
    return roc_auc_score(targets, scores, axis=1)


def update_torchmetrics(metrics: Sequence[Any], variables: Mapping[str, Any], sizes: Sequence[int]) -> None:
    """Update each ``Metric`` once per batch of ``sizes`` with that batch's predictions and targets."""
    import torch
    name = type(metrics[0]).__name__
    predictions = np.asarray(_variable(variables, PREDICTIONS, name))
    targets = np.asarray(_variable(variables, TARGETS, name))
    if len(predictions) != sum(sizes) or len(targets) != sum(sizes):
        raise ValueError(f"Expected one prediction and one target per validation item ({sum(sizes)} items). "
                         f"Received: {len(predictions)} predictions, {len(targets)} targets. Save them with "
                         f"mode='e' into variables that start empty.")
    predictions, targets = torch.as_tensor(predictions), torch.as_tensor(targets)
    start = 0
    for size in sizes:
        for metric in metrics:
            metric.update(predictions[start:start + size], targets[start:start + size])
        start += size


def compute_torchmetric(metric: Any) -> float:
    """``metric.compute()`` as a float (a rank that saw no batch says nothing about it: its states are empty)."""
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='.*compute.*before.*update.*')
        return float(metric.compute())

