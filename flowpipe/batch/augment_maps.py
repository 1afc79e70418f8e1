"""Per-item 3x3 maps of geometric transforms, in numpy: what ``images_warp`` resamples images through.

Coordinates are continuous pixel coordinates ``(x, y)``: pixel ``(row i, column j)`` covers ``[j, j+1) x [i,
i+1)``, its centre is ``(j + 0.5, i + 0.5)``, ``x`` grows to the right and ``y`` downwards (PIL's convention).
A map is the *inverse* of a transform: it takes a point of the output image to the point of the input image it
comes from, as PIL's ``Image.transform`` data does. Maps of consecutive transforms compose by multiplying them
in order (``first @ second``), so a chain of rotate, scale, shift and flip is one map and one resampling.
"""
from __future__ import annotations

import numpy as np

__all__ = ['RESAMPLE', 'affine_rows', 'expanded_sizes', 'flip_map', 'is_translation', 'resample_mode',
           'rotation_map', 'scale_map', 'translation_map']

RESAMPLE = ('nearest', 'bilinear', 'bicubic')
_PIL_RESAMPLE = {0: 'nearest', 2: 'bilinear', 3: 'bicubic'}  # PIL's Image.NEAREST, BILINEAR, BICUBIC


def resample_mode(resample: str | int) -> str:
    """``'nearest'``, ``'bilinear'`` or ``'bicubic'`` from that name or PIL's constant (0, 2, 3)."""
    if isinstance(resample, (int, np.integer)) and not isinstance(resample, bool) and int(resample) in _PIL_RESAMPLE:
        return _PIL_RESAMPLE[int(resample)]
    if resample in RESAMPLE:
        return resample
    raise ValueError(f"Expected resample to be one of {RESAMPLE!r} (or PIL's 0, 2, 3). Received: "
                     f"resample={resample!r}.")


def _maps(n: int) -> np.ndarray:
    return np.tile(np.eye(3), (n, 1, 1))


def translation_map(dx: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """Maps of a shift of the content by ``(dx, dy)`` pixels (right and down for positive values)."""
    maps = _maps(len(dx))
    maps[:, 0, 2], maps[:, 1, 2] = -np.asarray(dx, dtype=np.float64), -np.asarray(dy, dtype=np.float64)
    return maps


def rotation_map(degrees: np.ndarray, centers: np.ndarray, shifts: np.ndarray | None = None) -> np.ndarray:
    """Maps of a counter-clockwise rotation about ``centers`` ``(n, 2)``, then a shift by ``shifts``."""
    radians = np.deg2rad(np.asarray(degrees, dtype=np.float64))
    cos, sin = np.cos(radians), np.sin(radians)
    shifts = np.zeros_like(centers) if shifts is None else shifts
    # Output point q comes from p = R^-1 (q - shift - centre) + centre; with y pointing down a counter-clockwise
    # turn on screen has R = [[cos, sin], [-sin, cos]], so R^-1 = [[cos, -sin], [sin, cos]].
    maps = _maps(len(radians))
    maps[:, 0, 0], maps[:, 0, 1], maps[:, 1, 0], maps[:, 1, 1] = cos, -sin, sin, cos
    moved = centers + shifts
    maps[:, 0, 2] = centers[:, 0] - cos * moved[:, 0] + sin * moved[:, 1]
    maps[:, 1, 2] = centers[:, 1] - sin * moved[:, 0] - cos * moved[:, 1]
    return maps


def scale_map(factors: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Maps of scaling by ``factors`` ``(n, 2)`` about the origin, then placing the result at ``offsets``."""
    maps = _maps(len(factors))
    maps[:, 0, 0], maps[:, 1, 1] = 1 / factors[:, 0], 1 / factors[:, 1]
    maps[:, 0, 2], maps[:, 1, 2] = -offsets[:, 0] / factors[:, 0], -offsets[:, 1] / factors[:, 1]
    return maps


def flip_map(chosen: np.ndarray, extent: np.ndarray, axis: int) -> np.ndarray:
    """Maps that mirror the chosen items along ``axis`` (0: left-right, 1: up-down) of images of ``extent``."""
    maps = _maps(len(chosen))
    maps[chosen, axis, axis] = -1
    maps[chosen, axis, 2] = np.asarray(extent, dtype=np.float64)[chosen]
    return maps


def affine_rows(data: np.ndarray) -> np.ndarray:
    """Maps from PIL-style data: 6 numbers ``(a, b, c, d, e, f)`` (affine) or 8 (perspective) per item."""
    data = np.asarray(data, dtype=np.float64)
    maps = _maps(len(data))
    maps[:, :2, :] = data[:, :6].reshape(-1, 2, 3)
    if data.shape[1] == 8:
        maps[:, 2, :2] = data[:, 6:]
    return maps


def is_translation(maps: np.ndarray) -> bool:
    """Whether every map only moves pixels by whole pixels (so images can be copied, not resampled)."""
    return bool(np.array_equal(maps[:, :2, :2], np.broadcast_to(np.eye(2), maps[:, :2, :2].shape))
                and np.array_equal(maps[:, 2], np.broadcast_to([0, 0, 1], maps[:, 2].shape))
                and np.array_equal(maps[:, :2, 2], np.round(maps[:, :2, 2])))


def expanded_sizes(degrees: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``(n, 2)`` ``(width, height)`` of canvases that hold images of ``sizes`` rotated by ``degrees``."""
    radians = np.deg2rad(np.asarray(degrees, dtype=np.float64))
    cos, sin = np.abs(np.cos(radians)), np.abs(np.sin(radians))
    width = sizes[:, 0] * cos + sizes[:, 1] * sin
    height = sizes[:, 0] * sin + sizes[:, 1] * cos
    # Rounding first keeps a 90-degree turn of a 10x6 image 6x10, not 7x11, despite cos(90) ~ 6e-17.
    return np.maximum(1, np.ceil(np.round(np.stack([width, height], axis=1), 6))).astype(np.int64)
