"""Geometric image actions: rotate, scale, shift, flip, transform and elastic_transform.

Each builds one 3x3 map per item (``augment_maps``) and warps all images of a shape together through
``grid_sample``. Consecutive actions that keep the image size are fused into one resampling (see
``images_base``). Whole-pixel shifts and flips copy pixels instead of resampling them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..expr.special import draw_for_items
from . import augment_maps as maps
from .augment_params import check_size, is_per_item, origins, pair, per_item
from .base import action
from .images_base import ImagesBase

__all__ = ['GeometryActions']

_FLIPS = {'lr': 0, 'ud': 1}
_METHODS = {'affine': 0, 'extent': 1, 'perspective': 2}    # PIL's Image.Transform values
_DATA_LENGTHS = {0: 6, 1: 4, 2: 8}

def _fill(fill: Any, alias: Any = None) -> float:
    value = fill if alias is None else alias
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not np.isfinite(value):
        raise ValueError(f"Expected fill as a number (one value for every channel). Received: fill={value!r}.")
    return float(value)


def _identity_unless(chosen: np.ndarray | None, built: np.ndarray) -> np.ndarray:
    if chosen is not None:
        built[~chosen] = np.eye(3)
    return built


class GeometryActions(ImagesBase):
    """Actions that move pixels: ``rotate``, ``scale``, ``shift``, ``flip``, ``transform``, ``elastic_transform``."""

    def _angles(self, angle: Any) -> np.ndarray:
        if (isinstance(angle, Sequence) and not isinstance(angle, str) and not is_per_item(angle)
                and len(angle) == 2 and all(isinstance(a, (int, float, np.number)) and np.isfinite(a) for a in angle)
                and angle[0] <= angle[1]):
            return draw_for_items(self, len(self), lambda n: self.random.uniform(angle[0], angle[1], size=n))
        return per_item(angle, len(self), 'angle', expected='degrees, or (low, high) with low <= high')

    @action
    def rotate(self, angle: Any, resample: str | int = 'bilinear', expand: bool = False, center: Any = None,
               translate: Any = None, fill: float = 0, fillcolor: float | None = None, p: float | None = None,
               src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> GeometryActions:
        """Rotate images counter-clockwise by ``angle`` degrees, as PIL's ``rotate``.

        Args:
            angle: degrees; ``(low, high)`` for a uniform random angle per item; ``P(...)`` for one per item.
            resample: ``'nearest'``, ``'bilinear'`` or ``'bicubic'`` (PIL's 0, 2, 3 too).
            expand: make each output large enough to hold the whole rotated image (sizes then follow the angles).
            center: the ``(x, y)`` point to turn about; the image centre by default.
            translate: ``(dx, dy)`` to move the result by after turning.
            fill: the value of pixels that come from outside the image (``fillcolor``, PIL's name, also works).
        """
        resample, fill = maps.resample_mode(resample), _fill(fill, fillcolor)
        n, chosen = len(self), self._chosen(p)
        angles = np.where(chosen, self._angles(angle), 0.0) if chosen is not None else self._angles(angle)
        shifts = np.zeros((n, 2)) if translate is None else pair(translate, n, 'translate')
        turn_about = None if center is None else pair(center, n, 'center')

        def make(sizes: np.ndarray) -> np.ndarray:
            return maps.rotation_map(angles, sizes / 2 if turn_about is None else turn_about, shifts)
        if not expand:
            return self._warp(lambda sizes: _identity_unless(chosen, make(sizes)), src, dst, fill, resample)

        def kernel(images: Any, positions: np.ndarray, size: tuple[int, int]) -> Any:
            from .images_warp import warp
            old = np.array([[images.shape[3], images.shape[2]]] * len(positions), dtype=np.float64)
            placed = maps.rotation_map(angles[positions], old / 2, np.array(size) / 2 - old / 2 + shifts[positions])
            return warp(images, placed, size=size, fill=fill, resample=resample)
        return self._per_size(kernel, lambda sizes: maps.expanded_sizes(angles, sizes), src, dst, chosen)

    @action
    def scale(self, factor: Any, preserve_shape: bool = False, origin: Any = 'center',
              resample: str | int = 'bilinear', fill: float = 0, p: float | None = None,
              src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> GeometryActions:
        """Scale the content of images by ``factor`` (a number, or ``(x, y)`` factors per axis).

        Args:
            preserve_shape: keep each image's size: a smaller picture is placed on a ``fill`` background, a larger
                one is cropped. Otherwise the image becomes ``ceil(size * factor)`` (antialiased when shrinking).
            origin: with ``preserve_shape``, where the picture goes (``'center'``, a corner such as
                ``'top_left'``, ``'random'``, ``(x, y)`` ints: its position if smaller, the crop's if larger, or
                floats in ``[0, 1)``: a position relative to the free room).
        """
        resample, fill = maps.resample_mode(resample), _fill(fill)
        n, chosen = len(self), self._chosen(p)
        factors = pair(factor, n, 'factor')
        if np.any(factors <= 0):
            raise ValueError(f"Expected positive scale factors. Received: factor={factor!r}.")
        if not preserve_shape:
            from .images_kernels import resize
            kernel = lambda images, positions, size: resize(images, size, resample)  # noqa: E731
            return self._per_size(kernel, lambda sizes: np.ceil(np.round(sizes * factors, 6)).astype(np.int64),
                                  src, dst, chosen)

        def make(sizes: np.ndarray) -> np.ndarray:
            offsets = origins(origin, sizes - sizes * factors, self.random, whole=False, batch=self).astype(np.float64)
            if not isinstance(origin, str) and not is_per_item(origin) and np.issubdtype(np.asarray(origin).dtype,
                                                                                        np.integer):
                offsets = np.where(factors > 1, -offsets, offsets)   # ints: the crop's corner when enlarging
            return _identity_unless(chosen, maps.scale_map(factors, offsets))
        return self._warp(make, src, dst, fill, resample)

    @action
    def shift(self, offset: Any, mode: str = 'const', fill: float = 0, resample: str | int = 'bilinear',
              p: float | None = None, src: str | Sequence[str] = 'images',
              dst: str | Sequence[str] | None = None) -> GeometryActions:
        """Move the content of images by ``offset=(dx, dy)`` pixels (right and down for positive values).

        Args:
            mode: ``'const'`` fills the uncovered border with ``fill``; ``'wrap'`` brings in what left the
                other side (whole pixels only).
            resample: for fractional offsets (whole-pixel offsets copy pixels exactly).
        """
        resample, fill = maps.resample_mode(resample), _fill(fill)
        n, chosen = len(self), self._chosen(p)
        offsets = pair(offset, n, 'offset')
        if chosen is not None:
            offsets[~chosen] = 0
        whole = np.array_equal(offsets, np.round(offsets))
        if mode == 'wrap':
            if not whole:
                raise ValueError(f"Expected whole-pixel offsets with mode='wrap'. Received: offset={offset!r}.")
            return self._translate(offsets, src, dst, chosen, fill, wrap=True)
        if mode != 'const':
            raise ValueError(f"Expected mode 'const' or 'wrap'. Received: mode={mode!r}.")
        if whole and not any(self._is_pending(name) for name, _ in self._pairs(src, dst)):
            return self._translate(offsets, src, dst, chosen, fill, wrap=False)
        return self._warp(lambda sizes: maps.translation_map(offsets[:, 0], offsets[:, 1]), src, dst, fill, resample)

    def _translate(self, offsets: np.ndarray, src: Any, dst: Any, chosen: np.ndarray | None, fill: float,
                   wrap: bool) -> GeometryActions:
        from .images_warp import translate

        def kernel(images: Any, positions: np.ndarray) -> Any:
            return translate(images, offsets[positions, 0], offsets[positions, 1], fill=fill, wrap=wrap)
        return self._apply_on(kernel, src, dst, chosen)

    @action
    def flip(self, mode: str = 'lr', p: float | None = None, src: str | Sequence[str] = 'images',
             dst: str | Sequence[str] | None = None) -> GeometryActions:
        """Mirror images left-right (``mode='lr'``) or upside-down (``'ud'``)."""
        if mode not in _FLIPS:
            raise ValueError(f"Expected mode 'lr' or 'ud'. Received: mode={mode!r}.")
        axis, chosen = _FLIPS[mode], self._chosen(p)
        picked = np.ones(len(self), dtype=bool) if chosen is None else chosen

        def flipped(values: Any, positions: np.ndarray, dtype: Any = None) -> Any:
            if picked[positions].all():
                return values.flip(3 - axis)
            for item in np.flatnonzero(picked[positions]).tolist():   # a fresh tensor of the warp's pass
                values[item] = values[item].flip(2 - axis)
            return values
        for source, target in self._pairs(src, dst):
            pending = self._pending[source] if source == target and self._is_pending(source) else None
            if pending is None:
                self._apply_on(lambda images, positions: images.flip(3 - axis), source, target, chosen)
            elif pending.after:   # behind fused pixel operations: flip their result in the same pass
                self._defer_after(source, flipped, lambda dtype: dtype)
            else:
                self._defer(source, maps.flip_map(picked, self._sizes(source)[:, axis], axis), pending.fill,
                            pending.resample)
        return self

    @action
    def transform(self, method: str | int = 'affine', data: Any = None, size: Sequence[int] | None = None,
                  resample: str | int = 'bilinear', fill: float = 0, p: float | None = None,
                  src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> GeometryActions:
        """Transform images as PIL's ``Image.transform(size, method, data)``: ``data`` maps output to input.

        Args:
            method: ``'affine'`` (``data`` = ``(a, b, c, d, e, f)``: the input point ``(a x + b y + c, d x + e y +
                f)`` for output ``(x, y)``), ``'perspective'`` (8 numbers) or ``'extent'`` (the input box
                ``(x0, y0, x1, y1)``); PIL's ``Image.AFFINE``, ``EXTENT``, ``PERSPECTIVE`` too.
            data: the numbers, or ``P(...)`` with one tuple per item.
            size: ``(width, height)`` of the output; the input's by default.
        """
        resample, fill, n = maps.resample_mode(resample), _fill(fill), len(self)
        kind = _METHODS.get(method, method) if isinstance(method, str) else method
        if kind not in _DATA_LENGTHS:
            raise ValueError(f"Expected method 'affine', 'perspective' or 'extent' (or PIL's AFFINE, PERSPECTIVE, "
                             f"EXTENT). Received: method={method!r}.")
        rows = per_item(data, n, 'data', width=_DATA_LENGTHS[kind],
                        expected=f"{_DATA_LENGTHS[kind]} numbers for method={method!r}")
        chosen = self._chosen(p)

        def make(sizes: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
            if kind != 1:
                return _identity_unless(chosen, maps.affine_rows(rows))
            out = sizes if out is None else out
            box = np.stack([(rows[:, 2] - rows[:, 0]) / out[:, 0], np.zeros(n), rows[:, 0],
                            np.zeros(n), (rows[:, 3] - rows[:, 1]) / out[:, 1], rows[:, 1]], axis=1)
            return _identity_unless(chosen, maps.affine_rows(box))
        if size is None:
            return self._warp(make, src, dst, fill, resample)
        width, height = check_size(size)

        def kernel(images: Any, positions: np.ndarray, out: tuple[int, int]) -> Any:
            from .images_warp import warp
            built = make(np.zeros((n, 2)), np.tile(out, (n, 1)))[positions]
            return warp(images, built, size=out, fill=fill, resample=resample)
        return self._per_size(kernel, lambda sizes: np.tile([width, height], (len(sizes), 1)), src, dst, chosen)

    @action
    def elastic_transform(self, alpha: Any, sigma: Any, fill: float | None = None, resample: str | int = 'bilinear',
                          p: float | None = None, src: str | Sequence[str] = 'images',
                          dst: str | Sequence[str] | None = None) -> GeometryActions:
        """Deform images by a smooth random field (Simard, Steinkraus and Platt, 2003).

        Every output pixel takes the input found ``alpha * d`` pixels away, where ``d`` is uniform noise in
        ``[-1, 1]`` per pixel and axis, smoothed by a Gaussian of ``sigma`` pixels (zero beyond the border). The
        field is drawn from the batch's generator, one per item, the same for every ``src`` component.

        Args:
            alpha: the strength, in pixels (``P(...)`` for one per item).
            sigma: the smoothness, in pixels (``P(...)`` for one per item).
            fill: ``None`` mirrors the image at its borders; a number fills what comes from outside.
        """
        from .images_data import on_chosen, read
        from .images_warp import elastic_field, warp
        resample, n, chosen = maps.resample_mode(resample), len(self), self._chosen(p)
        fill = None if fill is None else _fill(fill)
        alphas, sigmas = per_item(alpha, n, 'alpha'), per_item(sigma, n, 'sigma')
        if np.any(sigmas <= 0):
            raise ValueError(f"Expected sigma > 0 (pixels). Received: sigma={sigma!r}.")
        strength = alphas if chosen is None else np.where(chosen, alphas, 0.0)   # others: a zero field
        seeds = self._item_seeds()
        for source, target in self._pairs(src, dst):
            pending = self._take_pending(source) if source == target else None
            if pending is not None and (pending.fill != fill or pending.resample != resample):
                self._pending[source] = pending
                pending = None
            images = read(pending.value, source in self._channels_first, source) if pending else self._read(source)

            def kernel(tensor: Any, positions: np.ndarray) -> Any:
                noise = np.stack([np.random.default_rng(seeds[i]).random((*tensor.shape[2:], 2), dtype=np.float32)
                                  for i in positions]) * 2 - 1
                field = elastic_field(noise, sigmas[positions], strength[positions]).to(tensor.device)
                base = pending.maps[positions] if pending else np.tile(np.eye(3), (len(positions), 1, 1))
                return warp(tensor, base, fill=fill or 0.0, resample=resample, field=field, reflect=fill is None)
            results = []
            for positions, tensor in images.groups:   # with a pending warp every item is resampled
                results.extend(on_chosen(kernel, positions, tensor, None if pending else chosen))
            self._write(source, target, results, images)
        return self

