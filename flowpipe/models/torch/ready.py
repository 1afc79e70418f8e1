"""Ready networks as ``TorchModel`` classes: ``MLP``, ``SimpleCNN``, ``VGG7``, ``ResNet``, ``ResNet18``, ``ResNet34``.

Each class only says which ``nn.Module`` to build (``flowpipe.models.torch.networks``) and which config keys tune
it; everything else (inputs, loss, optimizer, devices) is ``TorchModel``'s.
"""
from __future__ import annotations

from .model import TorchModel
from .networks import MLPNetwork, ResNetNetwork, SimpleCNNNetwork, VGGNetwork, resnet18, resnet34

__all__ = ['MLP', 'ResNet', 'ResNet18', 'ResNet34', 'SimpleCNN', 'VGG7']

_CONV_OPTIONS = {'body/filters': 'filters', 'batch_norm': 'batch_norm', 'head/dropout': 'dropout'}


class MLP(TorchModel):
    """A multi-layer perceptron on the flattened input; ``body/units`` (hidden widths), ``body/dropout``."""

    network_factory = staticmethod(MLPNetwork)
    network_options = {'body/units': 'units', 'body/dropout': 'dropout'}


class SimpleCNN(TorchModel):
    """A small CNN; ``body/filters`` (one 3x3 convolution per width), ``batch_norm``, ``head/dropout``."""

    network_factory = staticmethod(SimpleCNNNetwork)
    network_options = _CONV_OPTIONS


class VGG7(TorchModel):
    """VGG with 7 convolutions in 3 stages; ``body/filters``, ``body/repeats``, ``batch_norm``, ``head/dropout``."""

    network_factory = staticmethod(VGGNetwork)
    network_options = {**_CONV_OPTIONS, 'body/repeats': 'repeats'}


class ResNet18(TorchModel):
    """ResNet18; ``body/filters`` (stage widths), ``initial_block/filters``, ``initial_block/downsample``,
    ``batch_norm``, ``head/dropout``."""

    network_factory = staticmethod(resnet18)
    network_options = {**_CONV_OPTIONS, 'initial_block/filters': 'initial_filters',
                       'initial_block/downsample': 'downsample'}


class ResNet(ResNet18):
    """A ResNet of basic blocks whose depth is set in the config: ``body/layers`` (blocks per stage, default
    ``(2, 2, 2, 2)``, ResNet18's), and the same options as ``ResNet18``."""

    network_factory = staticmethod(ResNetNetwork)
    network_options = {**ResNet18.network_options, 'body/layers': 'layers'}


class ResNet34(ResNet18):
    """ResNet34; the same options as ``ResNet18``."""

    network_factory = staticmethod(resnet34)
