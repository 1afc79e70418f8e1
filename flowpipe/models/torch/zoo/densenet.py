"""DenseNet121/169/201/264 (Huang et al., 2016) as configs over the blocks: a 7x7 stride-2 convolution and a max
pooling, four dense blocks (growth 32, 1x1 bottleneck of 4x growth) with a transition (norm, activation, 1x1
convolution halving the channels, 2x2 average pooling) after each but the last, then norm, activation, global
average pooling and a dense layer."""
from __future__ import annotations

from typing import ClassVar

from ..blocks.named import DenseBlock
from ..model import TorchModel

__all__ = ['DenseNet121', 'DenseNet169', 'DenseNet201', 'DenseNet264']


class DenseNet121(TorchModel):
    """DenseNet121: dense blocks of 6, 12, 24 and 16 layers (``body/blocks/num_layers``), ``growth_rate`` 32."""

    LAYERS: ClassVar[list[int]] = [6, 12, 24, 16]

    @classmethod
    def default_config(cls) -> dict:
        transition = {'layout': ['nacv', 'nacv', 'nacv', ''], 'channels': 'same//2', 'kernel_size': 1,
                      'pool_size': 2, 'pool_stride': 2}
        return {'loss': 'ce',
                'initial_block': {'layout': 'cnap', 'channels': 64, 'kernel_size': 7, 'stride': 2, 'pool_size': 3,
                                  'pool_stride': 2},
                'body': {'type': 'encoder', 'output_type': 'tensor', 'num_stages': 4, 'order': ['block', 'downsample'],
                         'blocks': {'base_block': DenseBlock, 'layout': 'nacd', 'num_layers': list(cls.LAYERS),
                                    'growth_rate': 32, 'bottleneck': 4, 'dropout_rate': 0.0},
                         'downsample': transition},
                'head': {'layout': 'naVf'}}


class DenseNet169(DenseNet121):
    """DenseNet169: dense blocks of 6, 12, 32 and 32 layers."""

    LAYERS = [6, 12, 32, 32]


class DenseNet201(DenseNet121):
    """DenseNet201: dense blocks of 6, 12, 48 and 32 layers."""

    LAYERS = [6, 12, 48, 32]


class DenseNet264(DenseNet121):
    """DenseNet264: dense blocks of 6, 12, 64 and 48 layers."""

    LAYERS = [6, 12, 64, 48]
