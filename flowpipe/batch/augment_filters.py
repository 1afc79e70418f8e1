"""Neighbourhood kernels: PIL's ``ImageFilter`` filters, ``ImageEnhance`` steps and salt, on ``(n, C, H, W)``.

Fixed filters are one depthwise convolution for all images and channels; rank filters (median, min, max) one
``unfold`` or pooling call. Borders are handled by repeating the edge pixels.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .augment_kernels import as_dtype, blend, gray, top_value
from .images_warp import gaussian_kernel

__all__ = ['FILTERS', 'enhance_step', 'filter_images', 'salt_images']

# PIL's ImageFilter kernels: (size, weights in reading order, scale, offset on the 0-255 scale).
_KERNELS = {
    'BLUR': (5, [1] * 5 + [1, 0, 0, 0, 1] * 3 + [1] * 5, 16, 0),
    'CONTOUR': (3, [-1, -1, -1, -1, 8, -1, -1, -1, -1], 1, 255),
    'DETAIL': (3, [0, -1, 0, -1, 10, -1, 0, -1, 0], 6, 0),
    'EDGE_ENHANCE': (3, [-1, -1, -1, -1, 10, -1, -1, -1, -1], 2, 0),
    'EDGE_ENHANCE_MORE': (3, [-1, -1, -1, -1, 9, -1, -1, -1, -1], 1, 0),
    'EMBOSS': (3, [-1, 0, 0, 0, 1, 0, 0, 0, 0], 1, 128),
    'FIND_EDGES': (3, [-1, -1, -1, -1, 8, -1, -1, -1, -1], 1, 0),
    'SHARPEN': (3, [-2, -2, -2, -2, 32, -2, -2, -2, -2], 16, 0),
    'SMOOTH': (3, [1, 1, 1, 1, 5, 1, 1, 1, 1], 13, 0),
    'SMOOTH_MORE': (5, [1] * 5 + [1, 5, 5, 5, 1, 1, 5, 44, 5, 1, 1, 5, 5, 5, 1] + [1] * 5, 100, 0),
}
_RANKED = ('MedianFilter', 'MinFilter', 'MaxFilter')
FILTERS = tuple(sorted(_KERNELS)) + ('BoxBlur', 'GaussianBlur') + _RANKED + ('UnsharpMask',)


def _float(images: torch.Tensor) -> torch.Tensor:
    return images if images.dtype in (torch.float32, torch.float64) else images.float()


def _convolve(images: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Correlate every channel with ``weights`` ``(k, k)`` (or ``(1, k)``, ``(k, 1)``), edges repeated."""
    values, channels = _float(images), images.shape[1]
    rows, cols = weights.shape
    padded = F.pad(values, (cols // 2, cols // 2, rows // 2, rows // 2), mode='replicate')
    kernel = weights.to(values.dtype).to(values.device).expand(channels, 1, rows, cols).contiguous()
    return F.conv2d(padded, kernel, groups=channels)


def _fixed(images: torch.Tensor, name: str) -> torch.Tensor:
    size, weights, scale, offset = _KERNELS[name]
    # Pillow applies the listed rows bottom to top (the only asymmetric one, EMBOSS, shows it).
    kernel = torch.tensor(weights, dtype=torch.float64).view(size, size).flip(0) / scale
    return _convolve(images, kernel) + offset * top_value(images.dtype) / 255


def _gaussian(images: torch.Tensor, radius: float) -> torch.Tensor:
    if radius <= 0:
        return _float(images)
    kernel = gaussian_kernel(radius, torch.float64)
    return _convolve(_convolve(images, kernel[None, :]), kernel[:, None])


def _ranked(images: torch.Tensor, name: str, size: int) -> torch.Tensor:
    if not isinstance(size, (int, np.integer)) or size < 1 or size % 2 == 0:
        raise ValueError(f"Expected {name}(size) with an odd positive size. Received: size={size!r}.")
    values = _float(images)
    padded = F.pad(values, (size // 2,) * 4, mode='replicate')
    if name == 'MaxFilter':
        return F.max_pool2d(padded, size, stride=1)
    if name == 'MinFilter':
        return -F.max_pool2d(-padded, size, stride=1)
    height, width = values.shape[2:]
    views = [padded[:, :, i:i + height, j:j + width] for i in range(size) for j in range(size)]
    if size == 3:
        return _median_of_nine(views)
    return torch.stack(views, dim=-1).median(dim=-1).values


def _median_of_nine(views: list) -> torch.Tensor:
    """The median of nine tensors by an odd-even transposition network: min/max passes, five times faster than
    ``torch.median`` over a stacked copy."""
    values = [view.clone() for view in views]
    for round_ in range(9):
        for a in range(round_ % 2, 8, 2):
            low = torch.minimum(values[a], values[a + 1])
            values[a + 1] = torch.maximum(values[a], values[a + 1])
            values[a] = low
    return values[4]


def _unsharp(images: torch.Tensor, radius: float = 2, percent: float = 150, threshold: float = 3) -> torch.Tensor:
    values = _float(images)
    detail = values - _gaussian(images, radius)
    sharper = values + detail * (percent / 100)
    return torch.where(detail.abs() >= threshold * top_value(images.dtype) / 255, sharper, values)


def filter_images(images: torch.Tensor, mode: str, *args: Any, **kwargs: Any) -> torch.Tensor:
    """PIL's ``image.filter(ImageFilter.<mode>(*args, **kwargs))`` on every image; the input's dtype back."""
    if mode in _KERNELS:
        if args or kwargs:
            raise TypeError(f"Expected filter({mode!r}) without arguments. Received: {args!r}, {kwargs!r}.")
        out = _fixed(images, mode)
    elif mode == 'GaussianBlur':
        out = _gaussian(images, *args, **kwargs) if args or kwargs else _gaussian(images, 2)
    elif mode == 'BoxBlur':
        radius = kwargs.get('radius', args[0] if args else None)
        if not isinstance(radius, (int, np.integer)) or radius < 0:
            raise ValueError(f"Expected BoxBlur(radius) with a whole radius >= 0. Received: radius={radius!r}.")
        box = torch.full((1, 2 * radius + 1), 1 / (2 * radius + 1), dtype=torch.float64)
        out = _convolve(_convolve(images, box), box.T)
    elif mode in _RANKED:
        out = _ranked(images, mode, kwargs.get('size', args[0] if args else 3))
    elif mode == 'UnsharpMask':
        out = _unsharp(images, *args, **kwargs)
    else:
        raise ValueError(f"Expected mode to be one of {FILTERS!r}. Received: mode={mode!r}.")
    return as_dtype(out, images.dtype)


def _smooth_keeping_edges(images: torch.Tensor) -> torch.Tensor:
    smooth = as_dtype(_fixed(images, 'SMOOTH'), images.dtype)
    edges = torch.ones_like(images, dtype=torch.bool)
    edges[:, :, 1:-1, 1:-1] = False
    return torch.where(edges, images, smooth)   # PIL filters the interior and keeps the border


def enhance_step(images: torch.Tensor, kind: str, factors: np.ndarray) -> torch.Tensor:
    """One of PIL's ``ImageEnhance`` steps (colour, contrast, brightness, sharpness), factor per item; floats."""
    factors = torch.as_tensor(factors, device=images.device)
    if kind == 'brightness':
        return blend(torch.zeros_like(_float(images)), images, factors)
    if kind == 'sharpness':
        return blend(_float(_smooth_keeping_edges(images)), images, factors)
    grey = as_dtype(gray(images), images.dtype).to(_float(images).dtype)   # PIL rounds its grey image
    if kind == 'contrast':
        mean = grey.mean(dim=(1, 2, 3), keepdim=True)
        degenerate = mean if images.is_floating_point() else (mean + 0.5).floor()
        return blend(degenerate.expand_as(_float(images)), images, factors)
    if images.shape[1] < 3:
        return _float(images)
    colours = blend(grey.expand(-1, 3, -1, -1), images[:, :3], factors)
    return torch.cat([colours, _float(images[:, 3:])], dim=1)


def salt_images(images: torch.Tensor, seeds: torch.Tensor, box: tuple[int, int], colors: torch.Tensor,
                per_seed: bool) -> torch.Tensor:
    """Paint a ``box = (width, height)`` from every seed ``(n, H, W)`` (its top-left corner) in ``colors``.

    ``colors`` is ``(n, C)``, one per image, or with ``per_seed`` ``(S, C)``, one per seed in the order of
    ``seeds.nonzero()``. Where boxes overlap, the later seed wins.
    """
    width, height = box
    n, channels = images.shape[:2]
    order = torch.full(seeds.shape, -1, dtype=torch.float32, device=images.device)
    found = seeds.nonzero(as_tuple=True)
    order[found] = torch.arange(len(found[0]), dtype=torch.float32, device=images.device)
    if (width, height) != (1, 1):   # a pixel is painted by the last seed whose box covers it
        order = F.max_pool2d(F.pad(order[:, None], (width - 1, 0, height - 1, 0), value=-1), (height, width),
                             stride=1)[:, 0]
    painted = order >= 0
    if not per_seed:
        paint = colors[:, :, None, None].expand(-1, -1, *images.shape[2:])
    else:
        paint = colors[order.clamp(min=0).long()].permute(0, 3, 1, 2)
    return torch.where(painted[:, None], as_dtype(paint.expand(-1, channels, -1, -1), images.dtype), images)
