"""Pooling of the letters ``p`` (max), ``v`` (average), ``P`` (global max) and ``V`` (global average)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .shapes import as_example, conv_padding, num_spatial

__all__ = ['AvgPool', 'GlobalAvgPool', 'GlobalMaxPool', 'MaxPool']


class MaxPool(nn.Module):
    """Max pooling on 1-3 spatial axes (letter ``p``).

    Args:
        inputs: an example input.
        pool_size: the window (an int or one per axis).
        pool_stride: the step (batchflow's ``pool_strides``).
        padding: ``'same'`` (output ``ceil(size / stride)``), ``'valid'`` or torch's padding.
    """

    _LAYERS: tuple = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)

    def __init__(self, inputs: Any = None, pool_size: Any = 2, pool_stride: Any = 2, padding: Any = 'same'):
        super().__init__()
        example = as_example(inputs)
        dims = num_spatial(example, 'p')
        pad = conv_padding(padding, example.shape[2:], pool_size, pool_stride)
        self.layer = self._LAYERS[dims - 1](kernel_size=pool_size, stride=pool_stride, padding=pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class AvgPool(MaxPool):
    """Average pooling (letter ``v``); padded positions count as zeros, as in torch."""

    _LAYERS = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)


class GlobalMaxPool(nn.Module):
    """The maximum over all spatial axes, as a ``(batch, channels)`` tensor (letter ``P``)."""

    def __init__(self, inputs: Any = None):
        super().__init__()
        if inputs is not None:
            num_spatial(as_example(inputs), 'P')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2).amax(dim=2)


class GlobalAvgPool(GlobalMaxPool):
    """The mean over all spatial axes, as a ``(batch, channels)`` tensor (letter ``V``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(2).mean(dim=2)
