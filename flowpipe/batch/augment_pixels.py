"""Colour and arithmetic actions: invert, clip, posterize, enhance, pil_convert, multiply, add, normalize.

Every kernel works on all images of a shape at once; per-item values (``P(...)``) and per-channel values become
``(n, C, 1, 1)`` tensors that broadcast. Integer images are taken to span 0-255 (their dtype's range) and float
images ``[0, 1]`` where a range matters (``invert``, ``posterize``, ``clip=True``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .augment_params import channel_values, is_per_item, per_item
from .base import action
from .images_base import ImagesBase

__all__ = ['PixelActions']

_ENHANCERS = {'h': 'colour', 'c': 'contrast', 'b': 'brightness', 's': 'sharpness'}
_CONVERSIONS = ('L', 'RGB', 'RGBA')


def _clip_range(clip: Any) -> tuple[float, float] | bool | None:
    if clip is None or clip is False or clip is True:
        return clip or None
    if isinstance(clip, Sequence) and len(clip) == 2 and all(isinstance(v, (int, float, np.number)) for v in clip):
        return float(clip[0]), float(clip[1])
    raise ValueError(f"Expected clip as True (to the output's range: 0-255 or 0-1), False or (low, high). "
                     f"Received: clip={clip!r}.")


def _arithmetic(op: Any, values: dict, n: int, clip: Any = None, preserve_type: bool = False) -> Any:
    """A kernel for ``op(image, *tables)``, a table ``(n, C, 1, 1)`` per entry of ``values`` (per item, channel).

    Integer images give float32 unless ``preserve_type``; ``clip`` as in ``multiply``.
    """
    import torch

    from .augment_kernels import as_dtype, top_value
    limits = _clip_range(clip)
    checked: dict[int, list] = {}   # the (n, C) values per channel count, checked once per action, not per piece

    def kernel(images: Any, positions: np.ndarray) -> Any:
        dtype = images.dtype if preserve_type or images.is_floating_point() else torch.float32
        work = images.to(torch.float64 if dtype == torch.float64 else torch.float32)
        channels = images.shape[1]
        if channels not in checked:
            checked[channels] = [channel_values(value, n, channels, name) for name, value in values.items()]
        tables = [torch.as_tensor(table[positions], dtype=work.dtype, device=images.device)[:, :, None, None]
                  for table in checked[channels]]
        out = op(work, *tables)
        if limits is not None:
            low, high = (0.0, top_value(dtype)) if limits is True else limits
            out = out.clamp_(low, high)
        return as_dtype(out, dtype)
    return kernel


class PixelActions(ImagesBase):
    """Actions that change pixel values where they are."""

    @action
    def invert(self, channels: int | Sequence[int] | str = 'all', p: float | None = None,
               src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> PixelActions:
        """Invert the given channels (indices, or ``'all'``): ``255 - x`` for uint8, ``1 - x`` for floats."""
        from .augment_kernels import top_value

        def kernel(images: Any, positions: np.ndarray) -> Any:
            top = top_value(images.dtype)
            if isinstance(channels, str) and channels == 'all':
                return top - images
            picked = [channels] if isinstance(channels, (int, np.integer)) else list(channels)
            if not all(isinstance(c, (int, np.integer)) and -images.shape[1] <= c < images.shape[1] for c in picked):
                raise ValueError(f"Expected channels as 'all' or indices below {images.shape[1]}. Received: "
                                 f"channels={channels!r}.")
            out = images.clone()
            out[:, picked] = top - images[:, picked]
            return out
        return self._apply(kernel, src, dst, p)

    @action
    def clip(self, low: Any = 0, high: Any = 255, p: float | None = None, src: str | Sequence[str] = 'images',
             dst: str | Sequence[str] | None = None) -> PixelActions:
        """Clip pixel values to ``[low, high]``: numbers, one value per channel, or ``P(...)`` per item."""
        import torch
        n = len(self)
        in_float = _arithmetic(lambda x, lows, highs: torch.maximum(torch.minimum(x, highs), lows),
                               {'low': low, 'high': high}, n, preserve_type=True)

        def kernel(images: Any, positions: np.ndarray) -> Any:
            bounds = [channel_values(value, n, images.shape[1], name)[positions]
                      for value, name in ((low, 'low'), (high, 'high'))]
            if images.is_floating_point() or any(not np.array_equal(b, np.round(b)) for b in bounds):
                return in_float(images, positions)
            info = torch.iinfo(images.dtype)   # whole bounds clip integer images in their own dtype
            lows, highs = (torch.as_tensor(np.clip(b, info.min, info.max), dtype=images.dtype,
                                           device=images.device)[:, :, None, None] for b in bounds)
            return torch.maximum(torch.minimum(images, highs), lows)
        return self._apply(kernel, src, dst, p)

    @action
    def posterize(self, bits: Any = 4, p: float | None = None, src: str | Sequence[str] = 'images',
                  dst: str | Sequence[str] | None = None) -> PixelActions:
        """Keep the ``bits`` (1-8) highest bits of every 8-bit value (PIL's ``posterize``): ``2 ** bits`` levels.

        Float images are read as 0-1 and quantized on the same 256 steps.
        """
        import torch

        from .augment_kernels import as_dtype
        counts = per_item(bits, len(self), 'bits', expected='an int from 1 to 8')
        if np.any((counts < 1) | (counts > 8) | (counts != np.round(counts))):
            raise ValueError(f"Expected bits as an int from 1 to 8. Received: bits={bits!r}.")

        def kernel(images: Any, positions: np.ndarray) -> Any:
            masks = torch.as_tensor((0xFF << (8 - counts[positions].astype(np.int64))) & 0xFF, dtype=torch.uint8,
                                    device=images.device)[:, None, None, None]
            if images.dtype == torch.uint8:
                return images & masks
            if not images.is_floating_point():
                raise ValueError(f"Expected uint8 or float images to posterize. Received: {images.dtype}.")
            levels = as_dtype(images * 255, torch.uint8)
            return ((levels & masks).to(images.dtype) / 255)
        return self._apply(kernel, src, dst, p)

    @action
    def enhance(self, layout: str = 'hcbs', factor: Any = (1, 1, 1, 1), p: float | None = None,
                src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> PixelActions:
        """Apply PIL's ``ImageEnhance`` steps in the order of ``layout``, each with its ``factor``.

        Args:
            layout: letters ``h`` (colour saturation), ``c`` (contrast), ``b`` (brightness), ``s`` (sharpness).
            factor: one number per letter (or one for all); 1 leaves the image as it is, 0 gives grey, black, a
                flat or a blurred image. ``P(...)`` gives one tuple per item.
        """
        from .augment_kernels import as_dtype
        from .augment_filters import enhance_step
        if not isinstance(layout, str) or any(letter not in _ENHANCERS for letter in layout):
            raise ValueError(f"Expected layout as letters from 'hcbs'. Received: layout={layout!r}.")
        single = not is_per_item(factor) and isinstance(factor, (int, float, np.number))
        factors = per_item((factor,) * len(layout) if single else factor, len(self), 'factor', width=len(layout),
                           expected=f"one number per letter of layout={layout!r}")

        def kernel(images: Any, positions: np.ndarray) -> Any:
            out = images
            for k, letter in enumerate(layout):
                out = as_dtype(enhance_step(out, _ENHANCERS[letter], factors[positions, k]), images.dtype)
            return out
        return self._apply(kernel, src, dst, p)

    @action
    def pil_convert(self, mode: str = 'L', p: float | None = None, src: str | Sequence[str] = 'images',
                    dst: str | Sequence[str] | None = None) -> PixelActions:
        """Convert colours as PIL's ``convert(mode)``: ``'L'`` (grey, one channel), ``'RGB'`` or ``'RGBA'``."""
        import torch

        from .augment_kernels import as_dtype, gray, top_value
        if mode not in _CONVERSIONS:
            raise ValueError(f"Expected mode to be one of {_CONVERSIONS!r}. Received: mode={mode!r}.")

        def kernel(images: Any, positions: np.ndarray) -> Any:
            if mode == 'L':
                return as_dtype(gray(images), images.dtype)
            colours = images[:, :3] if images.shape[1] >= 3 else images[:, :1].expand(-1, 3, -1, -1)
            if mode == 'RGB':
                return colours.contiguous()
            alpha = images[:, 3:4] if images.shape[1] == 4 else torch.full_like(images[:, :1], top_value(images.dtype))
            return torch.cat([colours, alpha], dim=1)
        return self._apply(kernel, src, dst, p)

    @action
    def multiply(self, multiplier: Any = 1.0, clip: Any = False, preserve_type: bool = False,
                 p: float | None = None, src: str | Sequence[str] = 'images',
                 dst: str | Sequence[str] | None = None) -> PixelActions:
        """Multiply pixel values by ``multiplier`` (a number, one per channel, or ``P(...)`` per item).

        Integer images become float32 unless ``preserve_type``; ``clip=True`` clips to the output's range (0-255
        for uint8, 0-1 for floats), ``clip=(low, high)`` to that range.
        """
        kernel = _arithmetic(lambda x, v: x * v, {'multiplier': multiplier}, len(self), clip, preserve_type)
        return self._apply(kernel, src, dst, p)

    @action
    def add(self, term: Any = 1.0, clip: Any = False, preserve_type: bool = False, p: float | None = None,
            src: str | Sequence[str] = 'images', dst: str | Sequence[str] | None = None) -> PixelActions:
        """Add ``term`` to pixel values (as ``multiply``: per channel, per item, ``clip``, ``preserve_type``)."""
        kernel = _arithmetic(lambda x, v: x + v, {'term': term}, len(self), clip, preserve_type)
        return self._apply(kernel, src, dst, p)

    @action
    def normalize(self, mean: Any = 0.0, std: Any = 1.0, p: float | None = None, src: str | Sequence[str] = 'images',
                  dst: str | Sequence[str] | None = None) -> PixelActions:
        """``(x - mean) / std`` with a scalar or one value per channel; integer images become float32."""
        if not is_per_item(std) and (np.any(np.asarray(std, dtype=np.float64) == 0) or np.ndim(std) > 1
                                     or np.ndim(mean) > 1):
            raise ValueError(f"Expected non-zero std and scalars or one value per channel. Received: mean={mean!r}, "
                             f"std={std!r}.")
        kernel = _arithmetic(lambda x, means, stds: (x - means) / stds, {'mean': mean, 'std': std}, len(self))
        return self._apply(kernel, src, dst, p)
