"""Batches: ``Batch`` with its components, the ``@action`` and ``@apply_parallel`` markers, items and merging; ``TokenBatch``
for token data."""
from .base import ActionSpec, Batch, ComponentsView, action
from .images import ImagesBatch
from .items import BatchItem
from .parallel import apply_parallel
from .tokens import TokenBatch

__all__ = ['ActionSpec', 'Batch', 'BatchItem', 'ComponentsView', 'ImagesBatch', 'TokenBatch', 'action',
           'apply_parallel']
