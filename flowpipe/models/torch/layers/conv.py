"""Convolutions of the letters ``c`` (plain), ``t`` (transposed), ``C``/``T`` (separable) and ``w``/``W``
(depthwise), on 1, 2 or 3 spatial axes, the input's channels read from the example input."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .shapes import as_example, conv_padding, num_channels, num_spatial, resolve_channels, transposed_padding

__all__ = ['Conv', 'ConvTranspose', 'DepthwiseConv', 'DepthwiseConvTranspose', 'SeparableConv',
           'SeparableConvTranspose']

_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_TRANSPOSED = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


class Conv(nn.Module):
    """A convolution (letter ``c``).

    Args:
        inputs: an example input (tensor or shape with the batch axis).
        channels: output channels: an int or an expression of ``'same'`` (batchflow's ``filters``).
        kernel_size, stride, dilation, groups: as in ``torch.nn.Conv2d`` (an int or one per axis).
        padding: ``'same'`` (output ``ceil(size / stride)``), ``'valid'`` (none) or torch's padding.
        bias: learn an additive bias (batchflow's default: none).
    """

    TRANSPOSED = False

    def __init__(self, inputs: Any = None, channels: int | str = 'same', kernel_size: Any = 3, stride: Any = 1,
                 dilation: Any = 1, groups: int = 1, padding: Any = 'same', bias: bool = False):
        super().__init__()
        example = as_example(inputs)
        dims, in_channels = num_spatial(example, 'c'), num_channels(example)
        out_channels = resolve_channels(channels, in_channels)
        options: dict[str, Any] = dict(kernel_size=kernel_size, stride=stride, dilation=dilation, groups=groups,
                                       bias=bias)
        if self.TRANSPOSED:
            if padding == 'same':
                options['padding'], options['output_padding'] = transposed_padding(kernel_size, stride, dilation, dims)
            else:
                options['padding'] = 0 if padding == 'valid' else padding
            self.layer: nn.Module = _TRANSPOSED[dims - 1](in_channels, out_channels, **options)
        else:
            options['padding'] = conv_padding(padding, example.shape[2:], kernel_size, stride, dilation)
            self.layer = _CONV[dims - 1](in_channels, out_channels, **options)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class ConvTranspose(Conv):
    """A transposed convolution (letter ``t``): ``'same'`` padding makes the output ``size * stride``."""

    TRANSPOSED = True


class DepthwiseConv(nn.Module):
    """A convolution of each channel on its own (letter ``w``): ``channels`` must be a multiple of the input's
    (``'same'`` by default); other arguments as in ``Conv``."""

    _CONV = Conv

    def __init__(self, inputs: Any = None, channels: int | str = 'same', kernel_size: Any = 3, stride: Any = 1,
                 dilation: Any = 1, padding: Any = 'same', bias: bool = False):
        super().__init__()
        in_channels = num_channels(as_example(inputs))
        out_channels = resolve_channels(channels, in_channels)
        if out_channels % in_channels:
            raise ValueError(f"Expected the channels of a depthwise convolution as a multiple of the input's "
                             f"{in_channels}. Received: channels={channels!r}.")
        self.layer = self._CONV(inputs, out_channels, kernel_size, stride, dilation, in_channels, padding, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class DepthwiseConvTranspose(DepthwiseConv):
    """The transposed depthwise convolution (letter ``W``)."""

    _CONV = ConvTranspose


class SeparableConv(nn.Module):
    """A depthwise convolution, then a 1x1 convolution to ``channels`` (letter ``C``); arguments as in ``Conv``."""

    _DEPTHWISE = DepthwiseConv

    def __init__(self, inputs: Any = None, channels: int | str = 'same', kernel_size: Any = 3, stride: Any = 1,
                 dilation: Any = 1, padding: Any = 'same', bias: bool = False):
        super().__init__()
        example = as_example(inputs)
        self.depthwise = self._DEPTHWISE(example, 'same', kernel_size, stride, dilation, padding, bias)
        with torch.no_grad():
            middle = self.depthwise(example)
        self.pointwise = Conv(middle, channels, 1, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x))


class SeparableConvTranspose(SeparableConv):
    """The transposed separable convolution (letter ``T``)."""

    _DEPTHWISE = DepthwiseConvTranspose
