"""Layers that change the size or the shape: ``b`` (interpolation), ``X``/``x`` (sub-pixel shuffle and
unshuffle), ``>`` (a new axis) and ``r`` (reshape)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional

from .shapes import as_example, num_spatial

__all__ = ['IncreaseDim', 'Interpolate', 'PixelShuffle', 'PixelUnshuffle', 'Reshape']

_MODES = {'n': 'nearest', 'l': 'linear', 'b': 'bilinear', 't': 'trilinear'}


class Interpolate(nn.Module):
    """Resize by ``scale_factor`` or to ``shape`` with ``F.interpolate`` (letter ``b``).

    Args:
        inputs: an example input.
        mode: torch's mode or its first letter (``'n'``, ``'l'``, ``'b'``, ``'t'``); ``'b'`` (bilinear) becomes
            linear or trilinear for inputs of one or three spatial axes.
        shape: the spatial size of the output (instead of ``scale_factor``).
        scale_factor: the factor (batchflow's ``factor``); 2 by default.
        align_corners: as in ``F.interpolate``.
    """

    def __init__(self, inputs: Any = None, mode: str = 'b', shape: Any = None, scale_factor: Any = None,
                 align_corners: bool = False):
        super().__init__()
        mode = _MODES.get(mode, mode)
        if inputs is not None and mode in ('linear', 'bilinear', 'trilinear'):
            mode = ('linear', 'bilinear', 'trilinear')[num_spatial(as_example(inputs), 'b') - 1]
        self.mode, self.shape = mode, tuple(shape) if shape is not None else None
        self.scale_factor = None if shape is not None else (scale_factor or 2)
        self.align_corners = align_corners if mode in ('linear', 'bilinear', 'trilinear', 'bicubic') else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return functional.interpolate(x, size=self.shape, scale_factor=self.scale_factor, mode=self.mode,
                                      align_corners=self.align_corners)


class PixelShuffle(nn.Module):
    """Channels into space: ``(c * f**2, h, w) -> (c, h * f, w * f)`` (letter ``X``, 2-D inputs)."""

    _LAYER: type = nn.PixelShuffle

    def __init__(self, upscale_factor: int = 2):
        super().__init__()
        self.layer = self._LAYER(int(upscale_factor))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class PixelUnshuffle(PixelShuffle):
    """Space into channels: ``(c, h * f, w * f) -> (c * f**2, h, w)`` (letter ``x``, 2-D inputs)."""

    _LAYER = nn.PixelUnshuffle

    def __init__(self, downscale_factor: int = 2):
        super().__init__(downscale_factor)


class IncreaseDim(nn.Module):
    """Add ``dim`` axes of size 1 at the end (letter ``>``): a flat ``(batch, features)`` becomes
    ``(batch, features, 1)``, which convolutions read as channels."""

    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = int(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(*x.shape, *([1] * self.dim))


class Reshape(nn.Module):
    """Reshape every item to ``reshape_to`` (letter ``r``; the batch axis is kept)."""

    def __init__(self, reshape_to: Any = None):
        super().__init__()
        if reshape_to is None:
            raise ValueError("Expected reshape_to, the shape of one item, for the layout letter 'r'. Received: None.")
        self.reshape_to = tuple(reshape_to)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], *self.reshape_to)
