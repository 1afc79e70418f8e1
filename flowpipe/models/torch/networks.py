"""Ready networks as plain ``nn.Module``s: MLP, a small CNN, VGG7, ResNet18/34.

Each network has three named top-level children, ``initial_block``, ``body`` and ``head``, so a
``device_map`` can place them on different devices. Sizes adapt to the input shape: convolutional bodies stop
pooling when the feature map gets small and the heads use global average pooling, so 8x8 inputs work as well as
224x224 ones. ``flowpipe.models.torch.ready`` wraps these modules into ``TorchModel`` classes.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from .parts import BasicBlock, ClassifierHead, ConvBlock, Flatten

__all__ = ['MLPNetwork', 'ResNetNetwork', 'SimpleCNNNetwork', 'VGGNetwork', 'resnet18', 'resnet34']


def _image_shape(input_shape: Sequence[int], network: str) -> tuple[int, int, int]:
    shape = tuple(int(size) for size in input_shape)
    if len(shape) != 3:
        raise ValueError(f"Expected the shape of one image as (channels, height, width) for {network}. "
                         f"Received: input_shape={tuple(input_shape)!r}. Add the channel axis, e.g. (1, 32, 32).")
    return shape


class _Network(nn.Module):
    """initial_block → body → head."""

    initial_block: nn.Module
    body: nn.Module
    head: nn.Module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.initial_block(x)))


class MLPNetwork(_Network):
    """A multi-layer perceptron on the flattened input.

    Args:
        input_shape: shape of one item (any number of dimensions).
        num_outputs: size of the last layer (classes for a classifier).
        units: widths of the hidden layers (the body).
        dropout: dropout after every hidden layer.
    """

    def __init__(self, input_shape: Sequence[int], num_outputs: int, units: Sequence[int] = (128, 64),
                 dropout: float = 0.0):
        super().__init__()
        self.initial_block = Flatten()
        layers: list[nn.Module] = []
        width = math.prod(int(size) for size in input_shape)
        for hidden in units:
            layers += [nn.Linear(width, hidden), nn.ReLU(inplace=True)]
            layers += [nn.Dropout(dropout)] if dropout else []
            width = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_outputs)


class SimpleCNNNetwork(_Network):
    """A small CNN: one convolution per width, 2x2 max pooling between them while the map is 4 pixels or more.

    Args:
        input_shape: (channels, height, width) of one image.
        num_outputs: number of outputs.
        filters: channels of each convolution; the first one is the initial block.
        batch_norm: batch norm after every convolution.
        dropout: dropout before the last linear layer.
    """

    def __init__(self, input_shape: Sequence[int], num_outputs: int, filters: Sequence[int] = (16, 32, 64),
                 batch_norm: bool = True, dropout: float = 0.0):
        super().__init__()
        channels, height, width = _image_shape(input_shape, 'SimpleCNN')
        self.initial_block = ConvBlock(channels, filters[0], batch_norm=batch_norm)
        layers: list[nn.Module] = []
        side = min(height, width)
        for previous, current in zip(filters, filters[1:]):
            if side >= 4:
                layers.append(nn.MaxPool2d(2))
                side //= 2
            layers.append(ConvBlock(previous, current, batch_norm=batch_norm))
        self.body = nn.Sequential(*layers)
        self.head = ClassifierHead(filters[-1], num_outputs, dropout)


class VGGNetwork(_Network):
    """A VGG-style network: stages of 3x3 convolutions separated by 2x2 max pooling (VGG7 by default).

    Args:
        input_shape: (channels, height, width) of one image.
        num_outputs: number of outputs.
        filters: channels of each stage.
        repeats: convolutions per stage; the first convolution is the initial block.
        batch_norm: batch norm after every convolution.
        dropout: dropout before the last linear layer.
    """

    def __init__(self, input_shape: Sequence[int], num_outputs: int, filters: Sequence[int] = (64, 128, 256),
                 repeats: Sequence[int] = (2, 2, 3), batch_norm: bool = True, dropout: float = 0.0):
        super().__init__()
        if len(filters) != len(repeats):
            raise ValueError(f"Expected as many stage repeats as stage filters. Received: filters={filters!r}, "
                             f"repeats={repeats!r}. Give one repeat count per stage.")
        channels, height, width = _image_shape(input_shape, 'VGG')
        self.initial_block = ConvBlock(channels, filters[0], batch_norm=batch_norm)
        layers: list[nn.Module] = []
        previous, side = filters[0], min(height, width)
        for stage, (current, repeat) in enumerate(zip(filters, repeats)):
            for _ in range(repeat - (stage == 0)):
                layers.append(ConvBlock(previous, current, batch_norm=batch_norm))
                previous = current
            if side >= 4:
                layers.append(nn.MaxPool2d(2))
                side //= 2
        self.body = nn.Sequential(*layers)
        self.head = ClassifierHead(filters[-1], num_outputs, dropout)


class ResNetNetwork(_Network):
    """A ResNet of basic blocks (ResNet18 / ResNet34 layouts).

    Args:
        input_shape: (channels, height, width) of one image.
        num_outputs: number of outputs.
        layers: residual blocks per stage, e.g. (2, 2, 2, 2) for ResNet18.
        filters: channels of each stage; every stage after the first halves the map while it is 4 pixels or more
            (maps stay at least 2x2, so batch norm works even on a one-item shard).
        initial_filters: channels of the initial convolution.
        downsample: the initial block's reduction: ``True`` a 7x7 stride-2 convolution and a stride-2 max pool
            (the ImageNet stem, /4), ``False`` one 3x3 stride-1 convolution (the CIFAR stem), ``'auto'``
            the ImageNet stem when both sides are 32 pixels or more.
        batch_norm: batch norm after every convolution.
        dropout: dropout before the last linear layer.
    """

    def __init__(self, input_shape: Sequence[int], num_outputs: int, layers: Sequence[int] = (2, 2, 2, 2),
                 filters: Sequence[int] = (64, 128, 256, 512), initial_filters: int = 64,
                 downsample: bool | str = 'auto', batch_norm: bool = True, dropout: float = 0.0):
        super().__init__()
        if len(filters) != len(layers):
            raise ValueError(f"Expected as many stage widths as stage depths. Received: filters={filters!r}, "
                             f"layers={layers!r}. Give one width per stage.")
        channels, height, width = _image_shape(input_shape, 'ResNet')
        side = min(height, width)
        if downsample == 'auto':
            downsample = side >= 32
        if downsample:
            self.initial_block = nn.Sequential(
                nn.Conv2d(channels, initial_filters, 7, stride=2, padding=3, bias=not batch_norm),
                nn.BatchNorm2d(initial_filters) if batch_norm else nn.Identity(),
                nn.ReLU(inplace=True), nn.MaxPool2d(3, stride=2, padding=1))
            side = (side + 3) // 4
        else:
            self.initial_block = ConvBlock(channels, initial_filters, batch_norm=batch_norm)
        blocks: list[nn.Module] = []
        previous = initial_filters
        for stage, (current, depth) in enumerate(zip(filters, layers)):
            stride = 2 if stage > 0 and side >= 4 else 1
            side = (side + 1) // 2 if stride == 2 else side
            for index in range(depth):
                blocks.append(BasicBlock(previous, current, stride if index == 0 else 1, batch_norm))
                previous = current
        self.body = nn.Sequential(*blocks)
        self.head = ClassifierHead(previous, num_outputs, dropout)


def resnet18(input_shape: Sequence[int], num_outputs: int, **options) -> ResNetNetwork:
    """A ResNet18 module for images of ``input_shape``; ``options`` as in ``ResNetNetwork``."""
    return ResNetNetwork(input_shape, num_outputs, layers=(2, 2, 2, 2), **options)


def resnet34(input_shape: Sequence[int], num_outputs: int, **options) -> ResNetNetwork:
    """A ResNet34 module for images of ``input_shape``; ``options`` as in ``ResNetNetwork``."""
    return ResNetNetwork(input_shape, num_outputs, layers=(3, 4, 6, 3), **options)
