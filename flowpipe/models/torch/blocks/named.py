"""Named blocks of well-known networks, each a ``Block`` over a layout: ``VGGBlock``, ``ResBlock``,
``BottleneckBlock`` (ResNet50+ and ResNeXt), ``DenseBlock`` (DenseNet), ``MBConvBlock`` (EfficientNet)."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..layers.multilayer import MultiLayer
from ..layers.shapes import as_example, num_channels, remember_output, resolve_channels, run_example
from .core import Block

__all__ = ['BottleneckBlock', 'DenseBlock', 'MBConvBlock', 'ResBlock', 'VGGBlock']


class VGGBlock(Block):
    """``depth3`` 3x3 then ``depth1`` 1x1 convolutions, each ``layout`` (``'cna'``), to ``channels``
    (batchflow's ``filters``)."""

    def __init__(self, inputs: Any = None, layout: str = 'cna', channels: Any = 'same', depth3: int = 1,
                 depth1: int = 0, filters: Any = None, **kwargs: Any):
        channels = resolve_channels(filters if filters is not None else channels, num_channels(as_example(inputs)))
        super().__init__(inputs=inputs, layout=layout * (depth3 + depth1), channels=channels,
                         kernel_size=[3] * depth3 + [1] * depth1, **kwargs)


#: the block's parameters its default shortcut takes too: its norm is the block's (``normalization_type``...)
_SHORTCUT_KEYS = ('normalization_type', 'normalization', 'batch_norm')


def _shortcut(in_channels: int, channels: int, stride: int, branch: dict | None, kwargs: dict) -> dict:
    """The shortcut of a residual block: ``branch`` if given, a strided 1x1 convolution and the block's norm
    where the shape changes, else the identity."""
    if branch is not None:
        return branch
    if channels == in_channels and stride == 1:
        return {}
    norm = {key: kwargs[key] for key in _SHORTCUT_KEYS if key in kwargs}
    return {'layout': 'cn', 'channels': channels, 'kernel_size': 1, 'stride': stride, **norm}


class ResBlock(Block):
    """Residual blocks: ``layout`` (``'cnacn'``) beside a shortcut, joined by ``op`` (``'+a'``: sum, then the
    activation), repeated ``n_reps`` times.

    Args:
        inputs: an example input.
        layout: the residual branch's letters.
        channels: output channels (an int, ``'same'``, or one per convolution of the layout).
        kernel_size, stride, groups: of the convolutions (one value, or one per convolution).
        downsample: ``True`` (2) or a factor: the first repetition's convolution ``downsample_idx`` strides by it.
        attention: ``'se'`` (or ``True``) adds a squeeze-and-excitation before the join.
        op: the join letters (``'+a'``, ``'+'``, ``'|'``...).
        branch: the shortcut's parameters (by default a strided 1x1 convolution and the block's norm, its
            ``normalization_type`` and ``normalization``, where the shape changes).
        n_reps: repetitions (the later ones keep the shape).
        **kwargs: other layer parameters (``activation``, ``normalization_type``, ``bias``...).
    """

    def __init__(self, inputs: Any = None, layout: str = 'cnacn', channels: Any = 'same', kernel_size: Any = 3,
                 stride: Any = 1, downsample: Any = False, downsample_idx: int = 0, attention: Any = None,
                 groups: Any = 1, op: str = '+a', branch: dict | None = None, n_reps: int = 1, **kwargs: Any):
        in_channels = num_channels(as_example(inputs))
        convs = sum(letter in 'ctCTwW' for letter in layout)
        channels = _per_conv(channels, convs, in_channels)
        factor = 2 if downsample is True else int(downsample or 1)
        parts = []
        for rep in range(int(n_reps)):
            strides = _per_conv(stride, convs, None)
            if rep == 0 and factor > 1:
                strides[downsample_idx] = factor
            elif rep > 0:
                strides = [1] * convs
            shortcut = _shortcut(in_channels, channels[-1], _product(strides), branch if rep == 0 else None,
                                 kwargs)
            full = 'R' + layout + ('S' if attention else '') + op
            parts.append(dict(layout=full, channels=list(channels), kernel_size=kernel_size, stride=strides,
                              groups=groups, branch=shortcut, attention=_attention(attention), **kwargs))
            in_channels = channels[-1]
        super().__init__(*parts, inputs=inputs)


def _attention(attention: Any) -> Any:
    return attention if isinstance(attention, str) else 'se'     # read only where the layout has an 'S'


def _per_conv(value: Any, count: int, in_channels: int | None) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * count
    if len(values) != count:
        raise ValueError(f"Expected one value or {count} (one per convolution of the layout). Received: {value!r}.")
    if in_channels is not None:
        values = [resolve_channels(item, in_channels) for item in values]
    return values


def _product(strides: list) -> int:
    result = 1
    for item in strides:
        result *= int(item) if isinstance(item, int) else int(item[0])
    return result


class BottleneckBlock(ResBlock):
    """The bottleneck residual block of ResNet50+: 1x1 to ``channels // bottleneck``, 3x3 (``groups`` of them,
    ResNeXt's cardinality), 1x1 to ``channels``; ``width`` sets the inner channels instead. Other arguments as in
    ``ResBlock``; the downsampling strides the 3x3 convolution."""

    def __init__(self, inputs: Any = None, layout: str = 'cna cna cn', channels: Any = 'same', bottleneck: int = 4,
                 width: int | None = None, groups: int = 1, downsample: Any = False, **kwargs: Any):
        out = resolve_channels(channels, num_channels(as_example(inputs)))
        inner = width or max(out // int(bottleneck), 1)
        if inner % groups:
            raise ValueError(f"Expected inner channels {inner} divisible by groups={groups}. Received: channels="
                             f"{channels!r}, bottleneck={bottleneck!r}, width={width!r}. Change one of them.")
        super().__init__(inputs=inputs, layout=layout, channels=[inner, inner, out], kernel_size=[1, 3, 1],
                         groups=[1, groups, 1], downsample=downsample, downsample_idx=1, **kwargs)


class DenseBlock(nn.Module):
    """``num_layers`` layers, each reading the concatenation of the block's input and all earlier layers' outputs
    and adding ``growth_rate`` channels (DenseNet).

    Args:
        inputs: an example input.
        layout: one layer's letters (``'nacd'``); with ``bottleneck`` a ``'nac'`` 1x1 convolution to
            ``bottleneck * growth_rate`` channels comes first.
        num_layers: layers in the block.
        growth_rate: channels each layer adds.
        skip: keep the block's input in the output (``False``: only the new channels, as in a DenseUNet decoder).
        bottleneck: the 1x1 convolution's channels as a multiple of ``growth_rate`` (0: none).
        **kwargs: other layer parameters (``kernel_size``, ``dropout_rate``...).
    """

    def __init__(self, inputs: Any = None, layout: str = 'nacd', num_layers: int = 4, growth_rate: int = 12,
                 skip: bool = True, bottleneck: int = 0, dropout_rate: float = 0.2, kernel_size: Any = 3,
                 **kwargs: Any):
        super().__init__()
        x = example = as_example(inputs)
        self.skip = skip
        self.layers = nn.ModuleList()
        if bottleneck:
            layout = 'nac' + layout
            channels: Any = [int(bottleneck) * growth_rate, growth_rate]
            kernel_size = [1, kernel_size]
        else:
            channels = growth_rate
        for _ in range(int(num_layers)):
            layer = MultiLayer(inputs=x, layout=layout, channels=channels, kernel_size=kernel_size,
                               dropout_rate=dropout_rate, **kwargs)
            x = torch.cat([x, run_example(layer, x)], dim=1)
            self.layers.append(layer)
        in_channels = num_channels(example)
        remember_output(self, example, x if skip else x[:, in_channels:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, dim=1)))
        return torch.cat(features if self.skip else features[1:], dim=1)


class MBConvBlock(Block):
    """EfficientNet's inverted residual: 1x1 expansion by ``expand_ratio`` (none at 1), a ``kernel_size``
    depthwise convolution of ``stride``, squeeze-and-excitation (``attention``), 1x1 projection to ``channels``;
    the shortcut where the shape is kept; ``n_reps`` repetitions (the later ones of stride 1).

    Args:
        inputs: an example input.
        channels: output channels.
        expand_ratio, kernel_size, stride, attention, n_reps: as above.
        **kwargs: other layer parameters (``activation``: ``'silu'`` in EfficientNet).
    """

    def __init__(self, inputs: Any = None, channels: Any = 'same', expand_ratio: int = 6, kernel_size: Any = 3,
                 stride: int = 1, attention: Any = False, n_reps: int = 1, **kwargs: Any):
        x = as_example(inputs)
        in_channels = num_channels(x)
        out = resolve_channels(channels, in_channels)
        parts = []
        for rep in range(int(n_reps)):
            step = int(stride) if rep == 0 else 1
            wide = in_channels * int(expand_ratio)
            layout, sizes, kernels, strides = '', [], [], []
            if expand_ratio != 1:
                layout, sizes, kernels, strides = 'cna', [wide], [1], [1]
            layout += 'wna' + ('S' if attention else '') + 'cn'
            sizes, kernels, strides = sizes + ['same', out], kernels + [kernel_size, 1], strides + [step, 1]
            if step == 1 and in_channels == out:
                layout = 'R' + layout + '+'
            parts.append(dict(layout=layout, channels=sizes, kernel_size=kernels, stride=strides,
                              attention=_attention(attention), **kwargs))
            in_channels = out
        super().__init__(*parts, inputs=inputs)
