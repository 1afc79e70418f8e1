"""Small building blocks the ready networks (`networks.py`) are made of; batchflow's layout language is `layers/`.

Every block is a plain ``nn.Module`` with no knowledge of configs, so networks read as a list of blocks.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ['BasicBlock', 'ClassifierHead', 'ConvBlock', 'Flatten']


class ConvBlock(nn.Sequential):
    """Convolution, optional batch norm, ReLU.

    Args:
        in_channels: channels of the input.
        out_channels: channels of the output.
        kernel_size: square kernel size; padding keeps the spatial size at stride 1.
        stride: convolution stride.
        batch_norm: add a ``BatchNorm2d`` after the convolution (the convolution then has no bias).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int = 3, stride: int = 1,
                 batch_norm: bool = True):
        layers: list[nn.Module] = [nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride,
                                             padding=kernel_size // 2, bias=not batch_norm)]
        if batch_norm:
            layers.append(nn.BatchNorm2d(out_channels))
        layers.append(nn.ReLU(inplace=True))
        super().__init__(*layers)


class BasicBlock(nn.Module):
    """The two-convolution residual block of ResNet18/34, with a 1x1 projection when the shape changes.

    Args:
        in_channels: channels of the input.
        out_channels: channels of the output.
        stride: stride of the first convolution (2 halves the spatial size).
        batch_norm: use batch norm after each convolution.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, batch_norm: bool = True):
        super().__init__()
        norm = nn.BatchNorm2d if batch_norm else (lambda channels: nn.Identity())
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=not batch_norm)
        self.bn1 = norm(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=not batch_norm)
        self.bn2 = norm(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=not batch_norm), norm(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class Flatten(nn.Module):
    """Flatten every dimension but the batch one."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


class ClassifierHead(nn.Sequential):
    """Global average pooling then a linear layer: works for any spatial size of the body's output.

    Args:
        in_channels: channels of the body's output.
        out_features: number of outputs (classes, or regression targets).
        dropout: dropout probability before the linear layer (0 disables it).
    """

    def __init__(self, in_channels: int, out_features: int, dropout: float = 0.0):
        layers: list[nn.Module] = [nn.AdaptiveAvgPool2d(1), Flatten()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(in_channels, out_features))
        super().__init__(*layers)
