"""EfficientNetB0-B7 (Tan and Le, 2019) as configs over the blocks: a 3x3 stride-2 convolution, seven stages of
``MBConvBlock`` (SiLU, squeeze and excitation), a 1x1 convolution to 1280 channels, global average pooling,
dropout and a dense layer. B1-B7 scale B0's widths (rounded to multiples of 8) and depths (rounded up) by their
coefficients; ``resolution`` is each one's image side in the paper (the network works on any size)."""
from __future__ import annotations

import math
from typing import ClassVar

from ..blocks.named import MBConvBlock
from ..model import TorchModel

__all__ = ['EfficientNetB0', 'EfficientNetB1', 'EfficientNetB2', 'EfficientNetB3', 'EfficientNetB4',
           'EfficientNetB5', 'EfficientNetB6', 'EfficientNetB7']

_CHANNELS = [16, 24, 40, 80, 112, 192, 320]
_REPEATS = [1, 2, 2, 3, 3, 4, 1]


def _width(channels: int, factor: float) -> int:
    scaled = channels * factor
    rounded = max(8, int(scaled + 4) // 8 * 8)
    return rounded + 8 if rounded < 0.9 * scaled else rounded


class EfficientNetB0(TorchModel):
    """EfficientNetB0 (width 1.0, depth 1.0, 224 pixels, dropout 0.2)."""

    WIDTH: ClassVar[float] = 1.0
    DEPTH: ClassVar[float] = 1.0
    resolution: ClassVar[int] = 224
    DROPOUT: ClassVar[float] = 0.2

    @classmethod
    def default_config(cls) -> dict:
        blocks = {'base_block': MBConvBlock, 'channels': [_width(c, cls.WIDTH) for c in _CHANNELS],
                  'n_reps': [math.ceil(n * cls.DEPTH) for n in _REPEATS], 'kernel_size': [3, 3, 5, 3, 5, 5, 3],
                  'stride': [1, 2, 2, 2, 1, 2, 1], 'expand_ratio': [1, 6, 6, 6, 6, 6, 6], 'attention': 'se',
                  'activation': 'silu'}
        return {'loss': 'ce',
                'initial_block': {'layout': 'cna', 'channels': _width(32, cls.WIDTH), 'kernel_size': 3, 'stride': 2,
                                  'activation': 'silu'},
                'body': {'type': 'encoder', 'output_type': 'tensor', 'num_stages': 7, 'order': ['block'],
                         'blocks': blocks},
                'head': {'layout': 'cna V d f', 'channels': _width(1280, cls.WIDTH), 'kernel_size': 1,
                         'activation': 'silu', 'dropout_rate': cls.DROPOUT}}


def _scaled(name: str, width: float, depth: float, resolution: int, dropout: float) -> type:
    doc = f"{name} (width {width}, depth {depth}, {resolution} pixels, dropout {dropout})."
    return type(name, (EfficientNetB0,), {'WIDTH': width, 'DEPTH': depth, 'resolution': resolution,
                                          'DROPOUT': dropout, '__doc__': doc, '__module__': __name__})


EfficientNetB1 = _scaled('EfficientNetB1', 1.0, 1.1, 240, 0.2)
EfficientNetB2 = _scaled('EfficientNetB2', 1.1, 1.2, 260, 0.3)
EfficientNetB3 = _scaled('EfficientNetB3', 1.2, 1.4, 300, 0.3)
EfficientNetB4 = _scaled('EfficientNetB4', 1.4, 1.8, 380, 0.4)
EfficientNetB5 = _scaled('EfficientNetB5', 1.6, 2.2, 456, 0.4)
EfficientNetB6 = _scaled('EfficientNetB6', 1.8, 2.6, 528, 0.5)
EfficientNetB7 = _scaled('EfficientNetB7', 2.0, 3.1, 600, 0.5)
