"""Metrics gathered batch by batch (``gather_metrics``): ``ClassificationMetrics``."""
from .classification import METRIC_ALIASES, ClassificationMetrics

__all__ = ['ClassificationMetrics', 'METRIC_ALIASES']
