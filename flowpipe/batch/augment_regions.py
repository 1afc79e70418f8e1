"""Region actions: crop, pad, put_on_background, cutout and split_to_patches.

They copy whole pixels (no resampling): windows, borders and pasted images are gathered for all items of a
shape at once, with per-item positions. Items whose outputs differ in size form separate groups.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .augment_params import channel_values, is_per_item, origins, size_pair
from .base import action
from .images_base import ImagesBase

__all__ = ['RegionActions']

_PAD_MODES = {'constant': 'constant', 'const': 'constant', 'reflect': 'reflect', 'edge': 'replicate',
              'replicate': 'replicate', 'wrap': 'circular', 'circular': 'circular'}


def _one_border(value: Any) -> np.ndarray:
    values = np.atleast_1d(np.asarray(value))
    if values.dtype.kind not in 'iu' or len(values) not in (1, 2, 4) or values.ndim != 1 or np.any(values < 0):
        raise ValueError(f"Expected border as a non-negative int, (left/right, top/bottom) or (left, top, right, "
                         f"bottom). Received: border={value!r}.")
    return np.resize(values, 4) if len(values) != 2 else np.tile(values, 2)


def _borders(border: Any, n: int) -> np.ndarray:
    """``(n, 4)`` ``(left, top, right, bottom)`` borders, as PIL's ``ImageOps.expand`` reads them."""
    if is_per_item(border):
        return np.stack([_one_border(item) for item in border]) if len(border) else np.zeros((0, 4), np.int64)
    return np.tile(_one_border(border), (n, 1))


class RegionActions(ImagesBase):
    """Actions that cut, extend or paste whole pixels."""

    @action
    def crop(self, origin: Any = 'center', shape: Any = None, crop_boundaries: bool = False,
             p: float | None = None, src: str | Sequence[str] = 'images',
             dst: str | Sequence[str] | None = None) -> RegionActions:
        """Cut a ``shape=(width, height)`` window from every image.

        Args:
            origin: the window's top-left corner ``(x, y)``; ``'center'``, ``'top_left'``, ``'top_right'``,
                ``'bottom_left'``, ``'bottom_right'``; ``'random'`` (a uniform position per image); floats in
                ``[0, 1)`` (relative to the free room); ``P(...)`` for one per item.
            shape: ``(width, height)`` of the window (an int for a square; ``P(...)`` for one per item).
            crop_boundaries: cut windows that go past the border down to the image (sizes may then differ);
                otherwise such a window is an error.
        """
        if shape is None:
            raise ValueError("Expected crop(origin, shape) with shape=(width, height). Received: no shape.")
        n, chosen = len(self), self._chosen(p)
        windows = size_pair(shape, n, 'shape')
        source = self._pairs(src, dst)[0][0]
        sizes = self._sizes(source)
        room = sizes - windows
        if not crop_boundaries and len(room) and room.min() < 0:
            bad = int(np.argmin(room.min(axis=1)))
            raise ValueError(f"Expected a crop shape=(width, height) that fits every image. Received: shape="
                             f"{tuple(windows[bad])!r} for an image of {sizes[bad][0]}x{sizes[bad][1]} (width x "
                             f"height) at position {bad}. Resize first, crop less, or pass crop_boundaries=True.")
        corners = origins(origin, room, self.random, batch=self)
        if not crop_boundaries and len(room) and (np.any(corners < 0) or np.any(corners > room)):
            raise ValueError(f"Expected a crop window inside every image. Received: origin={origin!r}, whose "
                             f"window goes past the border. Move the origin, crop less, or pass "
                             f"crop_boundaries=True.")
        starts = np.maximum(corners, 0)
        ends = np.minimum(corners + windows, sizes)
        if np.any(ends <= starts):
            raise ValueError(f"Expected crop windows that overlap their images. Received: origin={origin!r}, "
                             f"shape={shape!r}.")
        return self._paste(-starts, lambda sizes: ends - starts, src, dst, chosen)

    def _paste(self, offsets: np.ndarray, out_sizes: Any, src: Any, dst: Any, chosen: np.ndarray | None,
               fill: Any = 0) -> RegionActions:
        """Move items by whole-pixel ``offsets`` onto outputs of ``out_sizes(sizes)``; ``fill`` elsewhere."""
        from .images_warp import translate

        def kernel(images: Any, positions: np.ndarray, size: tuple[int, int]) -> Any:
            value = fill(images, positions, size) if callable(fill) else fill
            return translate(images, offsets[positions, 0], offsets[positions, 1], size=size, fill=value)
        return self._per_size(kernel, out_sizes, src, dst, chosen)

    @action
    def pad(self, border: Any = 0, fill: Any = 0, mode: str = 'constant', p: float | None = None,
            src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> RegionActions:
        """Add borders, as PIL's ``ImageOps.expand``: the image grows by them.

        Args:
            border: pixels on every side; ``(left/right, top/bottom)``; or ``(left, top, right, bottom)``;
                ``P(...)`` for one per item.
            fill: the borders' value with ``mode='constant'``.
            mode: ``'constant'`` (``'const'``), ``'reflect'``, ``'edge'`` (``'replicate'``) or ``'wrap'``
                (``'circular'``).
        """
        if mode not in _PAD_MODES:
            raise ValueError(f"Expected mode to be one of {sorted(_PAD_MODES)!r}. Received: mode={mode!r}.")
        n, chosen = len(self), self._chosen(p)
        borders = _borders(border, n)
        out_sizes = (lambda sizes: sizes + borders[:, :2] + borders[:, 2:])  # noqa: E731
        if _PAD_MODES[mode] == 'constant':
            if isinstance(fill, bool) or not isinstance(fill, (int, float, np.number)):
                raise ValueError(f"Expected fill as a number. Received: fill={fill!r}.")
            return self._paste(borders[:, :2], out_sizes, src, dst, chosen, fill)
        from .augment_kernels import pad_by_mode

        def kernel(images: Any, positions: np.ndarray, size: tuple[int, int]) -> Any:
            return pad_by_mode(images, borders[positions], _PAD_MODES[mode])
        return self._per_size(kernel, out_sizes, src, dst, chosen)

    @action
    def put_on_background(self, background: Any, origin: Any = 'center', mask: Any = None,
                          p: float | None = None, src: str | Sequence[str] = 'images',
                          dst: str | Sequence[str] | None = None) -> RegionActions:
        """Paste every image onto ``background`` at ``origin``; the result has the background's size.

        Args:
            background: an image ``(H, W, C)`` or ``(H, W)``, channels-last whatever the component's layout,
                numpy or torch; ``P(...)`` for one per item. One channel is used for every channel.
            origin: where the image's top-left corner goes (as in ``crop``; the room is the background's size
                minus the image's). Parts of the image outside the background are cut off.
            mask: ``(h, w)`` opacity of the image, 0-255 (uint8), ``[0, 1]`` (float) or bool, as PIL's ``paste``.
        """
        from .augment_kernels import background_of
        n, chosen = len(self), self._chosen(p)
        backgrounds = [background[i] for i in range(n)] if is_per_item(background) else [background] * n
        grounds = np.array([np.shape(item)[1::-1] if np.ndim(item) in (2, 3) else (0, 0) for item in backgrounds],
                           dtype=np.int64).reshape(n, 2)
        if n and grounds.min() < 1:
            raise ValueError(f"Expected background as an image (H, W) or (H, W, C). Received: "
                             f"{type(backgrounds[0]).__name__} of shape {np.shape(backgrounds[0])!r}.")
        source = self._pairs(src, dst)[0][0]
        corners = origins(origin, grounds - self._sizes(source), self.random, batch=self)
        masks = None if mask is None else ([mask[i] for i in range(n)] if is_per_item(mask) else [mask] * n)
        fill = lambda images, positions, size: background_of(images, [backgrounds[i] for i in positions])  # noqa
        if masks is None:
            return self._paste(corners, lambda sizes: grounds, src, dst, chosen, fill)
        from .augment_kernels import paste_with_mask

        def kernel(images: Any, positions: np.ndarray, size: tuple[int, int]) -> Any:
            return paste_with_mask(images, fill(images, positions, size), [masks[i] for i in positions],
                                   corners[positions])
        return self._per_size(kernel, lambda sizes: grounds, src, dst, chosen)

    @action
    def cutout(self, origin: Any = 'random', shape: Any = 8, color: Any = 0, p: float | None = None,
               src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> RegionActions:
        """Fill a ``shape=(width, height)`` box at ``origin`` with ``color`` (a number or one per channel).

        ``origin`` reads as in ``crop``; ``shape``, ``origin`` and ``color`` take ``P(...)`` for one per item.
        """
        from .augment_kernels import fill_boxes
        n, chosen = len(self), self._chosen(p)
        boxes = size_pair(shape, n, 'shape')
        corners = origins(origin, self._sizes(self._pairs(src, dst)[0][0]) - boxes, self.random, batch=self)

        def kernel(images: Any, positions: np.ndarray) -> Any:
            colors = channel_values(color, n, images.shape[1], 'color')[positions]
            return fill_boxes(images, corners[positions], boxes[positions], colors)
        return self._apply_on(kernel, src, dst, chosen)

    @action
    def split_to_patches(self, patch_shape: Any, stride: Any = 1, drop_last: bool = False,
                         src: str = 'images', dst: str | None = None, droplast: bool | None = None) -> RegionActions:
        """Cut every image into ``patch_shape=(width, height)`` patches, ``stride=(x, y)`` pixels apart.

        Each item of ``dst`` becomes its patches, in reading order: ``(P, h, w, C)`` channels-last or
        ``(P, C, h, w)`` channels-first, so that the batch keeps one entry per item. Unless ``drop_last``, a
        last row and column of patches flush with the bottom and right borders covers what the stride left.
        ``droplast`` is the name batchflow's image tutorial uses for ``drop_last``.
        """
        from .augment_kernels import patches_of, write_patches
        if droplast is not None:
            if drop_last and not droplast:
                raise ValueError(f"Expected drop_last= or droplast= (the same switch), not both. Received: "
                                 f"drop_last={drop_last!r}, droplast={droplast!r}.")
            drop_last = bool(droplast)
        patch = size_pair(patch_shape, 1, 'patch_shape')[0]
        steps = size_pair(stride, 1, 'stride')[0]
        sizes = self._sizes(src)
        if len(sizes) and np.any(sizes < patch):
            raise ValueError(f"Expected patch_shape within every image. Received: patch_shape={patch_shape!r} for "
                             f"images down to {sizes.min(axis=0).tolist()!r} (width, height).")
        read = self._read(src)
        groups = [(positions, patches_of(tensor, patch, steps, drop_last)) for positions, tensor in read.groups]
        first = src in self._channels_first
        return self._store(src if dst is None else dst, write_patches(groups, read, first), first)
