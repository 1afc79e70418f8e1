"""Turning per-item data (lists, arrays, tensors) into something indexable by an array of positions."""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ['as_item_array', 'object_array']


def object_array(items: Any) -> np.ndarray:
    """A 1-D object array holding ``items`` as they are (numpy would otherwise try to stack them)."""
    result = np.empty(len(items), dtype=object)
    for position, item in enumerate(items):
        result[position] = item
    return result


def as_item_array(values: Any, name: str = 'values') -> Any:
    """``values`` as an array with one entry per item along the first axis.

    Arrays and tensors (anything with ``shape`` and ``__getitem__``) are kept as they are; sequences become a
    numpy array when their items have one shape, else a 1-D object array (images of different sizes).

    Raises:
        TypeError: ``values`` is a scalar or has no length.
    """
    if values is None or (hasattr(values, 'shape') and hasattr(values, '__getitem__') and len(values.shape)):
        return values
    if not hasattr(values, '__len__') or isinstance(values, (str, bytes, dict)):
        raise TypeError(f"Expected {name} to be an array or a sequence with one entry per item. "
                        f"Received: {type(values).__name__} {values!r:.80}")
    try:
        array = np.asarray(values)
    except ValueError:
        return object_array(values)
    if array.ndim == 0:
        raise TypeError(f"Expected {name} to have one entry per item. Received a scalar: {values!r:.80}")
    if array.dtype == object and array.ndim > 1:
        return object_array(values)
    return array
