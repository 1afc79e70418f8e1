"""Metrics gathered batch by batch (``gather_metrics``), batchflow's kinds: ``ClassificationMetrics``,
``SegmentationMetricsByPixels``, ``SegmentationMetricsByInstances``, ``RegressionMetrics``, ``Loss``; and the
exact ROC AUC (``roc_auc_score``, ``roc_curve``)."""
from .auc import roc_auc_score, roc_curve
from .base import Metrics, infmean
from .classification import METRIC_ALIASES, ClassificationMetrics
from .loss import Loss
from .regression import RegressionMetrics
from .segmentation import SegmentationMetricsByInstances, SegmentationMetricsByPixels, connected_components

__all__ = ['ClassificationMetrics', 'Loss', 'METRIC_ALIASES', 'Metrics', 'RegressionMetrics',
           'SegmentationMetricsByInstances', 'SegmentationMetricsByPixels', 'connected_components', 'infmean',
           'roc_auc_score', 'roc_curve']
