"""Small torch helpers shared by the batch, model and engine layers (below all of them: it imports no flowpipe
module).

- ``to_tensor``: an array-like as a tensor, numpy memory shared where torch can take it;
- ``NO_CONTEXT``: the one reusable do-nothing context of the engines' hooks.

Importing this module imports torch: the modules that need it import it where they need torch anyway.
"""
from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch

__all__ = ['NO_CONTEXT', 'to_tensor']

#: Reusable: entering it does nothing (cheaper than a new ``nullcontext()`` per piece).
NO_CONTEXT = contextlib.nullcontext()


def to_tensor(value: Any, name: str) -> torch.Tensor:
    """``value`` as a tensor: a tensor as it is, an array sharing its memory where torch can take it (a copy for
    read-only memory or negative strides); a ``TypeError`` naming ``name`` for non-numeric data."""
    if isinstance(value, torch.Tensor):
        return value
    array = np.asarray(value)
    if array.dtype == object:
        raise TypeError(f"Expected {name!r} as a numeric array or tensor. Received: an object array of shape "
                        f"{array.shape} (items of different shapes?). Make one array first, e.g. with to_array().")
    if array.dtype.kind in 'USV':
        sample = array.flat[0] if array.size else ''
        raise TypeError(f"Expected {name!r} as a numeric array or tensor. Received: an array of dtype "
                        f"{array.dtype} (e.g. {sample!r}). Encode text labels as integers first, e.g. "
                        f"codes = np.unique(labels, return_inverse=True)[1], with 'inputs/{name}/classes' set to the "
                        f"number of distinct labels.")
    if not array.flags.writeable or any(stride < 0 for stride in array.strides):
        array = array.copy()        # torch takes neither read-only memory nor negative strides
    return torch.from_numpy(array)
