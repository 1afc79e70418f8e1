"""Concatenating batches and cutting them to a size: the pipeline's ``rebatch`` is built on this."""
from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

from flowpipe.data.arrays import object_array
from flowpipe.data.index import DatasetIndex

__all__ = ['concat_values', 'merge_batches']


def concat_values(parts: Sequence[Any]) -> Any:
    """Concatenate per-item arrays (or torch tensors); parts whose items differ in shape give an object array."""
    torch = sys.modules.get('torch')
    if torch is not None and all(isinstance(part, torch.Tensor) for part in parts):
        if len({tuple(part.shape[1:]) for part in parts}) == 1:
            return torch.cat(list(parts))
    if all(isinstance(part, np.ndarray) for part in parts):
        if len({part.shape[1:] for part in parts}) == 1 and (
                all(part.dtype != object for part in parts) or all(part.ndim == 1 for part in parts)):
            return np.concatenate(parts)
    return object_array([item for part in parts for item in part])


def merge_batches(batches: Sequence[Any], batch_size: int | None = None, components: Any = None,
                  batch_class: type | None = None) -> tuple[Any, Any]:
    """Concatenate ``batches`` (components and indices); split off everything past ``batch_size`` items.

    ``components`` (a name or a sequence) keeps only those; ``batch_class`` is the class of the result (the first
    batch's by default).

    Returns:
        ``(merged, rest)``: ``merged`` holds the first ``batch_size`` items (all of them when ``batch_size`` is
        ``None`` or larger), ``rest`` the others as a batch, or ``None``.
    """
    batches = list(batches)
    if not batches:
        raise ValueError("Expected at least one batch to merge. Received an empty sequence")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise ValueError(f"Expected batch_size to be a positive int or None. Received: batch_size={batch_size!r}")
    first = batches[0]
    names = first.components if components is None else _names(components, batches)
    for batch in batches[1:]:
        if components is None and batch.components != first.components:
            raise ValueError(f"Expected batches with the same components. Received {first.components!r} and "
                             f"{batch.components!r}; add the missing components before merging")
    data = {name: _merge_component(name, [getattr(batch, name) for batch in batches]) for name in names}
    ids = np.concatenate([batch.indices for batch in batches]) if len(batches) > 1 else first.indices
    index = DatasetIndex._from_ids(ids, parent=first.index)
    merged = (batch_class or type(first))(index, data=data, dataset=first.dataset, check=False)
    merged.components = names
    raw = [batch._raw for batch in batches]
    if any(part is not None for part in raw):
        merged._raw = _merge_component('data', raw)
    if batch_size is None or len(merged) <= batch_size:
        return merged, None
    return merged.subset(slice(0, batch_size)), merged.subset(slice(batch_size, None))


def _names(components: Any, batches: list) -> tuple[str, ...]:
    names = (components,) if isinstance(components, str) else tuple(components)
    missing = sorted({name for batch in batches for name in names if name not in batch.components})
    if missing:
        raise ValueError(f"Expected every batch to have the components to merge {names!r}. Received batches "
                         f"without {missing!r}")
    return names


def _merge_component(name: str, parts: list) -> Any:
    if all(part is None for part in parts):
        return None
    if any(part is None for part in parts):
        raise ValueError(f"Expected component {name!r} to hold data in every batch or in none. Received None in "
                         f"{sum(part is None for part in parts)} of {len(parts)} batches")
    return parts[0] if len(parts) == 1 else concat_values(parts)
