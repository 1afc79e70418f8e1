"""batchflow's layout language: one letter a layer (``MultiLayer``), each layer built from an example input.

The table of letters and their parameters is ``multilayer.LETTERS`` (and ``docs/models.md``).
"""
from .combine import Branch, Combine, SelfAttention
from .conv import Conv, ConvTranspose, DepthwiseConv, DepthwiseConvTranspose, SeparableConv, SeparableConvTranspose
from .core import Activation, AlphaDropout, Dense, Dropout, Flatten, Normalization
from .multilayer import LETTERS, REFUSED_LETTERS, MultiLayer
from .pooling import AvgPool, GlobalAvgPool, GlobalMaxPool, MaxPool
from .resize import IncreaseDim, Interpolate, PixelShuffle, PixelUnshuffle, Reshape

__all__ = ['Activation', 'AlphaDropout', 'AvgPool', 'Branch', 'Combine', 'Conv', 'ConvTranspose', 'Dense',
           'DepthwiseConv', 'DepthwiseConvTranspose', 'Dropout', 'Flatten', 'GlobalAvgPool', 'GlobalMaxPool',
           'IncreaseDim', 'Interpolate', 'LETTERS', 'MaxPool', 'MultiLayer', 'Normalization', 'PixelShuffle',
           'PixelUnshuffle', 'REFUSED_LETTERS', 'Reshape', 'SelfAttention', 'SeparableConv', 'SeparableConvTranspose']
assert __all__ == sorted(__all__)
