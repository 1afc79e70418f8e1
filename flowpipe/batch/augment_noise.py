"""Random pixel actions and filters: salt, additive_noise, multiplicative_noise, filter.

Noise is drawn once per group of equal-shaped images, from the batch's generator (or a torch generator seeded
from it), so a run with a seed gives the same noise whatever the prefetch.
"""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .augment_params import channel_values, per_item, size_pair
from .base import action
from .images_base import ImagesBase

__all__ = ['NoiseActions']

_DISTRIBUTIONS = ('normal', 'uniform')


@functools.lru_cache(maxsize=256)
def _keywords(func: Callable) -> frozenset:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def _call(func: Callable, rng: np.random.Generator, **kwargs: Any) -> Any:
    """``func(**kwargs)``, plus ``rng=`` when ``func`` takes it (so its draws follow the batch's seed)."""
    return func(**kwargs, rng=rng) if 'rng' in _keywords(func) else func(**kwargs)


def _draws(func: Callable, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` values of ``func``: one call with ``size=count`` when it takes ``size``, else one per value."""
    if 'size' in _keywords(func):
        return np.asarray(_call(func, rng, size=count))
    return np.asarray([_call(func, rng) for _ in range(count)])


def _check_noise(noise: Any) -> None:
    if callable(noise):
        return
    if (isinstance(noise, Sequence) and not isinstance(noise, str) and len(noise) == 3
            and noise[0] in _DISTRIBUTIONS and all(isinstance(v, (int, float, np.number)) for v in noise[1:])):
        return
    raise ValueError(f"Expected noise as a callable taking size= (and rng=, to follow the batch's seed), or "
                     f"('normal', mean, std) or ('uniform', low, high). Received: noise={noise!r}.")


class NoiseActions(ImagesBase):
    """Actions that add random pixels or noise, and PIL's filters."""

    def _noise(self, noise: Any, like: Any, seeds: np.ndarray) -> Any:
        """Noise shaped as ``like`` ``(k, C, H, W)``, in its float dtype and device.

        A distribution is drawn per item from a torch generator seeded by the item's ``seeds`` entry, in ``(C, H,
        W)`` order whatever the layout, so both layouts get the same noise (and a fused warp, whose values are
        channels-first, adds it in one contiguous pass). A callable gets ``size=(k, H, W, C)``.
        """
        import torch
        k, channels, height, width = like.shape
        if callable(noise):
            values = _call(noise, self.random, size=(k, height, width, channels))
            values = torch.as_tensor(np.asarray(values) if not isinstance(values, torch.Tensor) else values)
            return values.to(like.device, like.dtype).expand(k, height, width, channels).permute(0, 3, 1, 2)
        values = torch.empty((k, channels, height, width), dtype=like.dtype, device=like.device)
        generator = torch.Generator(device=like.device)
        for item, seed in zip(values, seeds):
            generator.manual_seed(int(seed))
            if noise[0] == 'normal':
                item.normal_(float(noise[1]), float(noise[2]), generator=generator)
            else:
                item.uniform_(float(noise[1]), float(noise[2]), generator=generator)
        return values

    def _noisy(self, op: Callable, noise: Any, clip: Any, preserve_type: bool, p: float | None, src: Any,
               dst: Any) -> NoiseActions:
        """Apply ``op(values, noise)``; fused behind a pending warp when the noise is a distribution."""
        import torch

        from .augment_kernels import as_dtype, top_value
        from .augment_pixels import _clip_range
        _check_noise(noise)
        limits, chosen = _clip_range(clip), self._chosen(p)
        seeds = self._item_seeds()

        def cast(dtype: Any) -> Any:
            return dtype if preserve_type or dtype.is_floating_point else torch.float32

        def noisy(values: Any, positions: np.ndarray, dtype: Any) -> Any:
            # ``values`` is a fresh tensor of the warp's pass or of ``kernel``: ``op`` works in place
            mixed = chosen is not None and not chosen[positions].all()
            before = values.clone() if mixed else None
            out = op(values, self._noise(noise, values, seeds[positions]))
            if limits is not None:
                low, high = (0.0, top_value(dtype)) if limits is True else limits
                out = out.clamp_(low, high)
            if mixed:
                out = torch.where(torch.as_tensor(chosen[positions], device=out.device)[:, None, None, None],
                                  out, before)
            return out

        def kernel(images: Any, positions: np.ndarray) -> Any:
            dtype = cast(images.dtype)
            work = images.to(torch.float64 if dtype == torch.float64 else torch.float32, copy=True)
            return as_dtype(noisy(work, positions, dtype), dtype)
        for source, target in self._pairs(src, dst):
            # A distribution draws from per-item seeds taken now, so it can run later, inside the warp.
            if callable(noise) or target != source or not self._defer_after(source, noisy, cast):
                self._apply_on(kernel, source, target, chosen)
        return self

    @action
    def additive_noise(self, noise: Any, clip: Any = False, preserve_type: bool = False, p: float | None = None,
                       src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> NoiseActions:
        """Add noise to every pixel.

        Args:
            noise: a callable ``noise(size=(k, H, W, C))`` giving an array of that shape (it gets the batch's
                generator as ``rng=`` when it takes one: ``lambda size, rng: rng.normal(0, 8, size)``), or
                ``('normal', mean, std)`` / ``('uniform', low, high)``, drawn by torch on the images' device from
                a generator seeded by the batch's.
            clip, preserve_type: as in ``multiply``; integer images become float32 unless ``preserve_type``.
        """
        return self._noisy(lambda x, values: x.add_(values), noise, clip, preserve_type, p, src, dst)

    @action
    def multiplicative_noise(self, noise: Any, clip: Any = False, preserve_type: bool = False,
                             p: float | None = None, src: str | Sequence[str] = 'images',
                             dst: str | Sequence[str] | None = None) -> NoiseActions:
        """Multiply every pixel by noise (``noise`` as in ``additive_noise``, e.g. ``('normal', 1, 0.1)``)."""
        return self._noisy(lambda x, values: x.mul_(values), noise, clip, preserve_type, p, src, dst)

    @action
    def salt(self, p_noise: Any = 0.015, color: Any = None, size: Any = 1, p: float | None = None,
             src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> NoiseActions:
        """Paint random boxes: every pixel starts one with probability ``p_noise`` (``P(...)`` per item).

        Args:
            color: white by default (255, or 1.0 for floats); a number or one per channel, ``P(...)`` for one
                per item, or a callable drawing one per box (called with ``size=`` when it takes it).
            size: the boxes' ``(width, height)`` (an int for a square), or a callable giving one per box.
        """
        from .augment_filters import salt_images
        n = len(self)
        chances = per_item(p_noise, n, 'p_noise', expected='a probability in [0, 1]')
        if np.any((chances < 0) | (chances > 1)):
            raise ValueError(f"Expected p_noise in [0, 1]. Received: p_noise={p_noise!r}.")
        boxes = None if callable(size) else size_pair(size, 1, 'size')[0]
        chosen = self._chosen(p)
        streams = self._item_seeds()

        def kernel(images: Any, positions: np.ndarray) -> Any:
            import torch
            draws = np.stack([np.random.default_rng(streams[i]).random(images.shape[2:], dtype=np.float32)
                              for i in positions])
            seeds = torch.as_tensor(draws < chances[positions, None, None], device=images.device)
            colors, per_seed = self._salt_colors(color, images, positions, int(seeds.sum()))
            if boxes is not None:
                return salt_images(images, seeds, (int(boxes[0]), int(boxes[1])), colors, per_seed)
            return self._salt_sized(images, seeds, size, colors, per_seed)
        return self._apply_on(kernel, src, dst, chosen)

    def _salt_colors(self, color: Any, images: Any, positions: np.ndarray, count: int) -> tuple[Any, bool]:
        import torch

        from .augment_kernels import top_value
        channels = images.shape[1]
        if callable(color):
            drawn = _draws(color, count, self.random).reshape(count, -1)
            return torch.as_tensor(drawn, dtype=torch.float64, device=images.device), True
        value = top_value(images.dtype) if color is None else color
        table = channel_values(value, len(self), channels, 'color')[positions]
        return torch.as_tensor(table, dtype=torch.float64, device=images.device), False

    def _salt_sized(self, images: Any, seeds: Any, size: Callable, colors: Any, per_seed: bool) -> Any:
        """Salt with a size drawn per box: one painting per distinct size, in seed order within each."""
        import torch

        from .augment_filters import salt_images
        found = seeds.nonzero()
        drawn = np.array([size_pair(_call(size, self.random), 1, 'size')[0] for _ in range(len(found))],
                         dtype=np.int64).reshape(-1, 2)
        out = images
        for box in np.unique(drawn, axis=0):
            which = np.flatnonzero((drawn == box).all(axis=1))
            chosen = torch.zeros_like(seeds)
            chosen[tuple(found[torch.as_tensor(which, device=found.device)].T)] = True
            out = salt_images(out, chosen, (int(box[0]), int(box[1])), colors[which] if per_seed else colors, per_seed)
        return out

    @action
    def filter(self, mode: str, *args: Any, p: float | None = None, src: str | Sequence[str] = 'images',
               dst: str | Sequence[str] | None = None, **kwargs: Any) -> NoiseActions:
        """Filter images as PIL's ``image.filter(ImageFilter.<mode>(*args, **kwargs))``.

        ``mode`` is one of ``BLUR``, ``CONTOUR``, ``DETAIL``, ``EDGE_ENHANCE``, ``EDGE_ENHANCE_MORE``, ``EMBOSS``,
        ``FIND_EDGES``, ``SHARPEN``, ``SMOOTH``, ``SMOOTH_MORE`` (PIL's kernels), ``GaussianBlur(radius=2)``,
        ``BoxBlur(radius)``, ``MedianFilter(size=3)``, ``MinFilter(size=3)``, ``MaxFilter(size=3)``,
        ``UnsharpMask(radius=2, percent=150, threshold=3)``. Borders repeat the edge pixels.
        """
        from .augment_filters import FILTERS, filter_images
        if mode not in FILTERS:
            raise ValueError(f"Expected mode to be one of {FILTERS!r}. Received: mode={mode!r}.")
        return self._apply(lambda images, positions: filter_images(images, mode, *args, **kwargs), src, dst, p)
