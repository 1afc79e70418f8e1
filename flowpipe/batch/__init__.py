"""Batches: ``Batch`` with its components, the ``@action`` marker, ``apply_parallel`` and merging."""
from .base import ActionSpec, Batch, ComponentsView, action
from .images import ImagesBatch

__all__ = ['ActionSpec', 'Batch', 'ComponentsView', 'ImagesBatch', 'action']
