"""The likely misuses of ``Dataset(...)``, each refused with the form that works: data given where the index goes
(``Dataset(X, y)``, ``Dataset(X)``, ``Dataset({'x': X})``), or an array where the batch class goes.

A dataset's first argument says which items there are (a number, ids, an index); the data goes in ``preloaded=``
(``Dataset(len(X), preloaded={'x': X, 'y': y})``), as in batchflow.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ['check_dataset_arguments']

_FORM = "Dataset(len(X), preloaded={'x': X, 'y': y})"


def _described(value: Any) -> str:
    """A short description of a value that may be a large array (never its whole repr)."""
    shape, dtype = getattr(value, 'shape', None), getattr(value, 'dtype', None)
    if shape is not None:
        return f"{type(value).__name__} of shape {tuple(shape)}{f' ({dtype})' if dtype is not None else ''}"
    if isinstance(value, Mapping):
        return f"a dict of {', '.join(f'{key!r}: {_described(item)}' for key, item in list(value.items())[:4])}"
    if isinstance(value, (list, tuple)):
        items = ', '.join(_described(item) for item in value[:4])
        return f"a {type(value).__name__} of {len(value)} items ({items}{', ...' if len(value) > 4 else ''})"
    return repr(value)[:80]


def _is_data(index: Any) -> bool:
    """Whether the index argument holds data rather than item ids."""
    if isinstance(index, Mapping) or type(index).__name__ == 'DataFrame':
        return True
    if isinstance(index, tuple) and index and all(hasattr(item, 'shape') for item in index):
        return True
    array = index if isinstance(index, np.ndarray) else None
    if array is None and hasattr(index, '__array__') and hasattr(index, 'shape'):      # a tensor
        array = np.asarray(index)
    return array is not None and (array.ndim > 1 or array.dtype.kind in 'fc')


def check_dataset_arguments(index: Any, batch_class: Any) -> None:
    """Refuse data given as the index or as the batch class, showing ``preloaded=``."""
    if _is_data(index):
        raise TypeError(f"Expected Dataset's first argument to say which items there are (a number of items, an "
                        f"array of ids or a DatasetIndex); the data goes in preloaded=. Received: "
                        f"{_described(index)}. Write {_FORM} (one entry per component, aligned with the items).")
    if batch_class is not None and not isinstance(batch_class, type):
        raise TypeError(f"Expected Dataset's second argument, batch_class, to be a Batch class. Received: "
                        f"{_described(batch_class)}. To give data, write {_FORM}.")
