"""Resizing kernels: a group of equal-shaped images ``(n, C, H, W)`` resized in one ``F.interpolate`` call."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .images_data import cast_rounded

__all__ = ['MODES', 'resize']

MODES = ('nearest', 'bilinear', 'bicubic')


def resize(images: torch.Tensor, size: tuple[int, int], mode: str = 'bilinear',
           antialias: bool = True) -> torch.Tensor:
    """Resize ``images`` to ``size=(width, height)``; downscaling is antialiased (as in PIL) unless nearest or
    ``antialias=False``.

    Integer images are rounded and clipped back to their dtype.
    """
    width, height = size
    kwargs = {} if mode == 'nearest' else {'align_corners': False, 'antialias': antialias}
    # torch resizes uint8 directly (about 10x faster than through float32) in these two modes; its uint8
    # bicubic rounds differently from the float path, so bicubic goes through float.
    direct = images.is_floating_point() or (images.dtype == torch.uint8 and mode in ('nearest', 'bilinear'))
    source = images if direct else images.float()
    out = F.interpolate(source, size=(height, width), mode=mode, **kwargs)
    if out.dtype == images.dtype:
        return out
    info = torch.iinfo(images.dtype)
    return cast_rounded(out.round_().clamp_(info.min, info.max), images.dtype)
