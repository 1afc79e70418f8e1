"""Arguments of image actions: one value for every item, or one per item from ``P(...)``.

An argument is a number (or a pair such as ``(x, y)``) that applies to every item, or a ``PerItem`` sequence
(what ``P(expr)`` gives an action) with one such value per item. These helpers turn both into arrays with one
row per item, check them and say what was expected when they are wrong.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowpipe.expr import PerItem
from flowpipe.expr.special import draw_for_items

__all__ = ['ORIGINS', 'channel_values', 'check_size', 'is_per_item', 'origins', 'pair', 'per_item', 'probability',
           'size_pair']

ORIGINS = ('center', 'top_left', 'top_right', 'bottom_left', 'bottom_right', 'random')
_CORNERS = {'center': (0.5, 0.5), 'top_left': (0.0, 0.0), 'top_right': (1.0, 0.0), 'bottom_left': (0.0, 1.0),
            'bottom_right': (1.0, 1.0)}


def check_size(size: Any, name: str = 'size') -> tuple[int, int]:
    """Validate a ``(width, height)`` pair of positive ints."""
    if (not isinstance(size, Sequence) or isinstance(size, str) or len(size) != 2
            or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s > 0 for s in size)):
        raise ValueError(f"Expected {name} as (width, height), two positive ints. Received: {name}={size!r}. "
                         f"Pass e.g. {name}=(32, 32).")
    return int(size[0]), int(size[1])


def is_per_item(value: Any) -> bool:
    """Whether ``value`` holds one entry per item (it comes from ``P(...)``)."""
    return isinstance(value, PerItem)


def _array(value: Any, name: str, shape: tuple[int, ...], expected: str) -> np.ndarray:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or not np.all(np.isfinite(array)) or (array.shape != shape and array.size != 1):
        raise ValueError(f"Expected {name} as {expected}. Received: {name}={value!r}.")
    return np.broadcast_to(array, shape)


def _stacked(values: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """``values`` as one finite float array of ``shape`` (what ``R(..., size=...)`` gives), else None."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return array if array.shape == shape and np.all(np.isfinite(array)) else None


def per_item(value: Any, n: int, name: str, width: int | None = None, expected: str | None = None) -> np.ndarray:
    """An ``(n,)`` array (or ``(n, width)``) of a value for all items or a ``PerItem`` with one per item.

    With ``width``, a single number stands for all ``width`` entries (``2`` is ``(2, 2)``).
    """
    shape = () if width is None else (width,)
    expected = expected or ('a number' if width is None else f'a number or {width} numbers')
    if is_per_item(value):
        if len(value) != n:
            raise ValueError(f"Expected P(...) with one {name} per item ({n}). Received: {len(value)} values.")
        whole = _stacked(value, (n, *shape))
        if whole is not None:
            return whole
        rows = [_array(item, name, shape, expected + ' per item') for item in value]
        return np.stack(rows) if rows else np.empty((0, *shape))
    return np.array(np.broadcast_to(_array(value, name, shape, expected), (n, *shape)))


def channel_values(value: Any, n: int, channels: int, name: str) -> np.ndarray:
    """``(n, channels)`` values from a number, one value per channel, or ``P(...)`` with one of those per item."""
    if not is_per_item(value):   # one value for all items: checked once
        return np.array(np.broadcast_to(_channel_row(value, channels, name), (n, channels)))
    out = np.empty((n, channels))
    for i in range(n):
        out[i] = _channel_row(value[i], channels, name)
    return out


def _channel_row(row: Any, channels: int, name: str) -> np.ndarray:
    try:
        values = np.atleast_1d(np.asarray(row, dtype=np.float64))
    except (TypeError, ValueError):
        values = np.array([np.nan])
    if values.ndim != 1 or len(values) not in (1, channels) or not np.all(np.isfinite(values)):
        raise ValueError(f"Expected {name} as a number or {channels} values, one per channel. Received: "
                         f"{name}={row!r}.")
    return values


def pair(value: Any, n: int, name: str) -> np.ndarray:
    """``(n, 2)`` pairs such as ``(x, y)`` offsets or per-axis factors; a number stands for both."""
    return per_item(value, n, name, width=2, expected='a number or a pair (x, y)')


def size_pair(value: Any, n: int, name: str) -> np.ndarray:
    """``(n, 2)`` positive whole ``(width, height)`` sizes; an int ``k`` stands for ``(k, k)``."""
    sizes = per_item(value, n, name, width=2, expected='an int or (width, height), positive ints')
    if len(sizes) and (np.any(sizes < 1) or not np.array_equal(sizes, np.round(sizes))):
        raise ValueError(f"Expected {name} as positive whole (width, height). Received: {name}={value!r}.")
    return sizes.astype(np.int64)


def probability(p: Any, n: int, random: np.random.Generator, batch: Any = None) -> np.ndarray | None:
    """Which items an action changes: ``None`` for all (``p=None`` or 1), else a boolean mask drawn per item (for
    the items of ``batch``'s global batch in a distributed run, see ``draw_for_items``)."""
    if p is None:
        return None
    if isinstance(p, bool) or not isinstance(p, (int, float, np.number)) or not 0 <= p <= 1:
        raise ValueError(f"Expected a probability p in [0, 1] or None. Received: p={p!r}.")
    if p == 1:
        return None
    if p == 0:
        return np.zeros(n, dtype=bool)
    return draw_for_items(batch, n, lambda count: random.random(count)) < p


def _relative_origin(origin: Any) -> tuple[float, float] | None:
    if isinstance(origin, str):
        return _CORNERS.get(origin)
    if (isinstance(origin, Sequence) and len(origin) == 2 and all(isinstance(v, (float, np.floating)) for v in origin)
            and all(0 <= v < 1 for v in origin)):
        return float(origin[0]), float(origin[1])
    return None


def _one_origin(origin: Any, room: np.ndarray, random: np.random.Generator, whole: bool,
                batch: Any = None) -> np.ndarray:
    """``(n, 2)`` positions ``(x, y)`` for one origin spec and free ``room`` ``(n, 2)`` (``batch``: the items'
    batch, whose uniform draws are those of its global batch in a distributed run)."""
    if isinstance(origin, str) and origin == 'random':
        uniform = draw_for_items(batch, len(room), lambda count: random.random((count, *room.shape[1:])))
        if not whole:
            return uniform * room
        return np.floor(uniform * (np.maximum(room, 0) + 1)).astype(np.int64)
    relative = _relative_origin(origin)
    if relative is not None:
        return np.floor(room * np.array(relative) + 1e-9).astype(np.int64) if whole else room * np.array(relative)
    if (isinstance(origin, (Sequence, np.ndarray)) and not isinstance(origin, str) and len(origin) == 2
            and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in origin)):
        return np.tile(np.asarray(origin, dtype=np.int64), (len(room), 1))
    raise ValueError(f"Expected origin to be one of {ORIGINS!r}, (x, y) ints, or (x, y) floats in [0, 1) "
                     f"(a position relative to the free room). Received: origin={origin!r}.")


def origins(origin: Any, room: np.ndarray, random: np.random.Generator, whole: bool = True,
            batch: Any = None) -> np.ndarray:
    """Whole-pixel positions ``(n, 2)`` of windows or pasted images, from ``origin`` and the free ``room``.

    ``room`` is, per item, how far the smaller box can move inside the larger one, ``(x, y)``: ``'center'`` puts
    it halfway, the corners at an end, ``'random'`` at a uniform whole position, floats in ``[0, 1)`` at that
    fraction, ints at that position. ``P(...)`` gives one origin per item. ``whole=False`` keeps fractions of
    pixels (for warps).
    """
    if is_per_item(origin):
        if len(origin) != len(room):
            raise ValueError(f"Expected P(...) with one origin per item ({len(room)}). Received: {len(origin)}.")
        return np.concatenate([_one_origin(item, room[i:i + 1], random, whole) for i, item in enumerate(origin)]) \
            if len(room) else np.empty((0, 2), dtype=np.int64)
    return _one_origin(origin, room, random, whole, batch)
