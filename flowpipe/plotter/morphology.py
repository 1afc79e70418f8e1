"""``dilated``: an image thickened by grey dilation before it is drawn (batchflow's ``dilate`` option of ``plot``),
so that structures one pixel thin stay visible on a figure much smaller than the image. Plain numpy.

The option reads as batchflow's: ``True`` dilates once by the default kernel, an int that many times, a tuple
``(height, width)`` once by a kernel of ones of that shape, a dict ``{'kernel': ..., 'iterations': ...}`` says both
(the kernel as a shape or as an array whose nonzero entries are the neighbours taken). The default kernel is
batchflow's: three rows by one column, so each pixel takes the largest value of itself and the pixels just above
and below it (thin horizontal lines get three pixels thick).
"""
from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral
from typing import Any

import numpy as np

__all__ = ['DEFAULT_KERNEL_SHAPE', 'dilate', 'dilated']

DEFAULT_KERNEL_SHAPE = (3, 1)
DICT_KEYS = ('kernel', 'iterations')


def _kernel(kernel: Any) -> np.ndarray:
    """A 2-d boolean kernel from a shape ``(height, width)`` or an array."""
    if isinstance(kernel, tuple):
        if len(kernel) != 2 or not all(isinstance(size, Integral) and size >= 1 for size in kernel):
            raise ValueError(f"Expected a dilation kernel's shape as (height, width), positive ints. Received: "
                             f"{kernel!r}. Pass dilate=(3, 3) for a 3 by 3 square.")
        return np.ones(kernel, dtype=bool)
    if not isinstance(kernel, np.ndarray):
        raise TypeError(f"Expected a dilation kernel as a shape (height, width) or a 2-d numpy array. Received: "
                        f"{type(kernel).__name__} {kernel!r:.60}.")
    if kernel.ndim != 2 or not kernel.any():
        raise ValueError(f"Expected a dilation kernel as a 2-d array with some nonzero entries. Received: shape "
                         f"{kernel.shape}, {int(np.count_nonzero(kernel))} nonzero.")
    return kernel != 0


def _iterations(iterations: Any) -> int:
    if isinstance(iterations, bool) or not isinstance(iterations, Integral) or iterations < 1:
        raise ValueError(f"Expected the number of dilations as a positive int. Received: {iterations!r}.")
    return int(iterations)


def parse_dilation(option: Any) -> tuple[np.ndarray, int] | None:
    """``(kernel, iterations)`` for ``plot``'s ``dilate`` option, or ``None`` where it asks for none."""
    if option is None or option is False:
        return None
    if option is True:
        return np.ones(DEFAULT_KERNEL_SHAPE, dtype=bool), 1
    if isinstance(option, Integral):
        return np.ones(DEFAULT_KERNEL_SHAPE, dtype=bool), _iterations(option)
    if isinstance(option, (tuple, np.ndarray)):
        return _kernel(option), 1
    if isinstance(option, Mapping):
        unknown = sorted(set(option) - set(DICT_KEYS))
        if unknown:
            raise TypeError(f"Expected dilate's dict keys among {list(DICT_KEYS)}. Received: {unknown}.")
        kernel = option.get('kernel', DEFAULT_KERNEL_SHAPE)
        return _kernel(kernel), _iterations(option.get('iterations', 1))
    raise TypeError(f"Expected dilate as True, an int (times), a tuple (kernel shape), a kernel array or a dict "
                    f"{{'kernel': ..., 'iterations': ...}}. Received: {type(option).__name__} {option!r:.60}.")


def _lowest(dtype: np.dtype) -> Any:
    """The value no other value of ``dtype`` is below: the padding a maximum ignores."""
    if np.issubdtype(dtype, np.bool_):
        return False
    if np.issubdtype(dtype, np.integer):
        return np.iinfo(dtype).min
    return -np.inf


def dilate(data: np.ndarray, kernel: np.ndarray, iterations: int = 1) -> np.ndarray:
    """Each pixel the largest value among itself and the kernel's neighbours, ``iterations`` times.

    The kernel is centred on the pixel at ``(height // 2, width // 2)`` (as OpenCV and batchflow place it); pixels
    outside the image and NaNs are ignored; axes after the first two (channels) are dilated each on its own.
    """
    data = np.asarray(data)
    if data.ndim < 2:
        raise ValueError(f"Expected an image of at least 2 dimensions to dilate. Received: shape {data.shape}.")
    height, width = data.shape[:2]
    top, left = kernel.shape[0] // 2, kernel.shape[1] // 2
    pads = [(top, kernel.shape[0] - 1 - top), (left, kernel.shape[1] - 1 - left)] + [(0, 0)] * (data.ndim - 2)
    for _ in range(iterations):
        padded = np.pad(data, pads, constant_values=_lowest(data.dtype))
        result = data.copy()
        for row, column in zip(*np.nonzero(kernel)):
            np.fmax(result, padded[row:row + height, column:column + width], out=result)
        data = result
    return data


def dilated(data: np.ndarray, option: Any) -> np.ndarray:
    """``data`` dilated as ``plot``'s ``dilate`` option says (as it is for ``None``/``False``)."""
    parsed = parse_dilation(option)
    return data if parsed is None else dilate(data, *parsed)
