"""Batches: ``Batch`` with its components, the ``@action`` and ``@apply_parallel`` markers, items and merging."""
from .base import ActionSpec, Batch, ComponentsView, action
from .images import ImagesBatch
from .items import BatchItem
from .parallel import apply_parallel

__all__ = ['ActionSpec', 'Batch', 'BatchItem', 'ComponentsView', 'ImagesBatch', 'action', 'apply_parallel']
