"""torchvision's augmentations: random_resized_crop, center_crop, color_jitter and random_erasing.

They take torchvision's arguments and draw their random parameters as torchvision does (the same distributions,
the same tries and fallbacks), but from the batch's generator, once per action for all items: a seeded run gives
the same images whatever the prefetch, the devices or the ranks. Sizes are ``(width, height)`` as everywhere in
flowpipe (torchvision's ``size`` is ``(height, width)``); an int is a square in both.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..expr.special import draw_for_items
from .augment_noise import NoiseActions
from .augment_params import channel_values, size_pair
from .augment_regions import RegionActions
from .base import action

__all__ = ['VisionActions']

_JITTERED = ('brightness', 'contrast', 'saturation', 'hue')
_CROP_MODES = ('bilinear', 'nearest')


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


def _span(value: Any, name: str, low: float = 0.0, high: float = math.inf) -> tuple[float, float]:
    """A ``(min, max)`` pair with ``low <= min <= max <= high``, or say what was expected."""
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(_is_number(v) for v in value):
        raise TypeError(f"Expected {name} as a pair of numbers (min, max). Received: {name}={value!r}.")
    if len(value) != 2 or not low <= value[0] <= value[1] <= high:
        raise ValueError(f"Expected {name} as (min, max) with {low} <= min <= max <= {high}. Received: "
                         f"{name}={tuple(value)!r}.")
    return float(value[0]), float(value[1])


def _jitter_range(value: Any, name: str) -> tuple[float, float]:
    """torchvision's reading of a ``ColorJitter`` argument: ``v`` is ``[max(0, 1 - v), 1 + v]`` (``[-v, v]`` for
    hue, ``v <= 0.5``), a pair is the range itself (hue within ``[-0.5, 0.5]``, the others non-negative)."""
    hue = name == 'hue'
    if _is_number(value):
        if not 0 <= value <= (0.5 if hue else math.inf):
            raise ValueError(f"Expected {name} as a number in [0, {0.5 if hue else 'inf'}) or (min, max). "
                             f"Received: {name}={value!r}.")
        return (-float(value), float(value)) if hue else (max(0.0, 1.0 - value), 1.0 + value)
    return _span(value, name, -0.5, 0.5) if hue else _span(value, name)


def _output_size(size: Any) -> tuple[int, int]:
    if size is None:
        raise TypeError("Expected size as an int or (width, height). Received: no size. Pass e.g. size=224.")
    width, height = size_pair(size, 1, 'size')[0]
    return int(width), int(height)


class VisionActions(RegionActions, NoiseActions):
    """torchvision's transforms as batch actions: ``random_resized_crop``, ``center_crop``, ``color_jitter``,
    ``random_erasing`` (``normalize`` is ``PixelActions``')."""

    def _uniforms(self, shape: tuple[int, ...]) -> np.ndarray:
        """Uniform numbers in [0, 1), ``(n, *shape)``, for the items of the batch's global batch."""
        return draw_for_items(self, len(self), lambda count: self.random.random((count, *shape)))

    @action
    def random_resized_crop(self, size: Any = None, scale: Sequence[float] = (0.08, 1.0),
                            ratio: Sequence[float] = (3 / 4, 4 / 3), mode: str = 'bilinear',
                            antialias: bool = True, p: float | None = None, src: str | Sequence[str] = 'images',
                            dst: str | Sequence[str] | None = None) -> VisionActions:
        """Crop a random box of every image and resize it to ``size``, as torchvision's ``RandomResizedCrop``.

        Per item: up to 10 tries of an area of ``scale`` times the image's (uniform) and an aspect ratio
        width / height of ``ratio`` (log-uniform); the first box that fits goes to a uniform position. If none
        fits, the centred largest box with an aspect ratio within ``ratio``.

        Args:
            size: the output ``(width, height)``; an int for a square.
            mode: ``'bilinear'`` or ``'nearest'``.
            antialias: with ``'bilinear'``, average over the source pixels when shrinking (torchvision's default
                since 0.17, and PIL's); ``False`` samples the 4 nearest pixels only (faster, aliased).
        """
        width, height = _output_size(size)
        scale, ratio = _span(scale, 'scale', 0.0), _span(ratio, 'ratio', 1e-12)
        if mode not in _CROP_MODES:
            raise ValueError(f"Expected mode to be one of {_CROP_MODES!r}. Received: mode={mode!r}.")
        from .augment_vision_kernels import TRIES, resized_crop_boxes, resized_crops
        chosen, draws, uniform = self._chosen(p), self._uniforms((TRIES, 2)), self._uniforms((2,))
        for source, target in self._pairs(src, dst):
            boxes = resized_crop_boxes(self._sizes(source), scale, ratio, draws, uniform)

            def kernel(images: Any, positions: np.ndarray) -> Any:
                return resized_crops(images, boxes[positions], (width, height), mode, antialias)
            self._apply_on(kernel, source, target, chosen)
        return self

    @action
    def center_crop(self, size: Any = None, p: float | None = None, src: str | Sequence[str] = 'images',
                    dst: str | Sequence[str] | None = None) -> VisionActions:
        """Cut the central ``size=(width, height)`` window (an int for a square), as torchvision's ``CenterCrop``.

        The window starts ``round((W - width) / 2)`` pixels in (half to even, as Python's ``round``); on a side
        where the image is smaller than the window, it is padded with zeros, ``(width - W) // 2`` before it.
        ``P(...)`` gives one size per item.
        """
        if size is None:
            raise TypeError("Expected size as an int or (width, height). Received: no size. Pass e.g. size=224.")
        windows = size_pair(size, len(self), 'size')
        chosen, source = self._chosen(p), self._pairs(src, dst)[0][0]
        room = self._sizes(source) - windows
        offsets = np.where(room >= 0, -np.round(room / 2), (-room) // 2).astype(np.int64)
        return self._paste(offsets, lambda sizes: windows, src, dst, chosen)

    @action
    def color_jitter(self, brightness: Any = 0, contrast: Any = 0, saturation: Any = 0, hue: Any = 0,
                     p: float | None = None, src: str | Sequence[str] = 'images',
                     dst: str | Sequence[str] | None = None) -> VisionActions:
        """Change brightness, contrast, saturation and hue by random factors, as torchvision's ``ColorJitter``.

        Each argument is a number ``v`` (a factor drawn from ``[max(0, 1 - v), 1 + v]``; for hue, a shift in
        ``[-v, v]`` turns, ``v <= 0.5``) or a range ``(min, max)``; 0 (or a range of 1, 1 / 0, 0 for hue) skips
        that step. Every item gets its own factors and its own random order of the four steps, as torchvision
        draws per call. Brightness blends with black, contrast with the mean grey level, saturation with the
        grey image (torchvision's weights 0.2989, 0.587, 0.114), hue turns colours in HSV; each step clips to
        the value range (0-255 or 0-1). Integer images are rounded after each step (torchvision truncates, so
        its uint8 results can be one level lower per step). Images need 1 or 3 channels; saturation and hue
        leave one-channel images as they are.
        """
        from .augment_vision_kernels import jitter
        ranges = [_jitter_range(value, name)
                  for name, value in zip(_JITTERED, (brightness, contrast, saturation, hue))]
        active = tuple(span != ((0.0, 0.0) if name == 'hue' else (1.0, 1.0)) for name, span in zip(_JITTERED, ranges))
        chosen = self._chosen(p)
        order = np.argsort(self._uniforms((4,)), axis=1, kind='stable')
        lows, highs = np.array(ranges).T
        factors = lows + self._uniforms((4,)) * (highs - lows)

        def kernel(images: Any, positions: np.ndarray) -> Any:
            return jitter(images, order[positions], factors[positions], active)
        return self._apply_on(kernel, src, dst, chosen)

    @action
    def random_erasing(self, p: float | None = 0.5, scale: Sequence[float] = (0.02, 0.33),
                       ratio: Sequence[float] = (0.3, 3.3), value: Any = 0, src: str | Sequence[str] = 'images',
                       dst: str | Sequence[str] | None = None) -> VisionActions:
        """Erase a random box of each item chosen with probability ``p``, as torchvision's ``RandomErasing``.

        Per item: up to 10 tries of an area of ``scale`` times the image's and an aspect ratio height / width of
        ``ratio`` (log-uniform); the first box smaller than the image on both sides goes to a uniform position.
        An item with no such try stays as it is.

        Args:
            value: the fill, a number or one per channel; ``'random'``: standard normal noise per pixel, for
                normalized float images (as torchvision erases after ``Normalize``).
        """
        scale, ratio = _span(scale, 'scale', 0.0, 1.0), _span(ratio, 'ratio', 1e-12)
        random_fill = isinstance(value, str)
        if random_fill and value != 'random':
            raise ValueError(f"Expected value as a number, one per channel, or 'random'. Received: value={value!r}.")
        from .augment_kernels import fill_boxes
        from .augment_vision_kernels import TRIES, erasing_boxes
        chosen, draws, uniform = self._chosen(p), self._uniforms((TRIES, 2)), self._uniforms((2,))
        seeds = self._item_seeds() if random_fill else None
        for source, target in self._pairs(src, dst):
            boxes = erasing_boxes(self._sizes(source), scale, ratio, draws, uniform)

            def kernel(images: Any, positions: np.ndarray) -> Any:
                if not random_fill:
                    colors = channel_values(value, len(positions), images.shape[1], 'value')
                    return fill_boxes(images, boxes[positions, :2], boxes[positions, 2:], colors)
                if not images.is_floating_point():
                    raise ValueError(f"Expected float images with value='random' (standard normal noise, for "
                                     f"normalized images). Received: {images.dtype} images. Call "
                                     f"`.to_array().normalize(mean, std)` first, or pass a number.")
                noise = self._noise(('normal', 0.0, 1.0), images, seeds[positions])
                return fill_boxes(images, boxes[positions, :2], boxes[positions, 2:], noise)
            self._apply_on(kernel, source, target, chosen)
        return self
