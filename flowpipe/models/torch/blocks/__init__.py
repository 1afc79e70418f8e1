"""Blocks of the layout language: ``Block`` (layers or blocks chained and repeated), batchflow's named blocks,
and the network parts (``modules``) and ``Network`` that chain them by a config."""
from .core import Block, ConvBlock, DefaultBlock, Downsample, Upsample
from .named import BottleneckBlock, DenseBlock, MBConvBlock, ResBlock, VGGBlock

__all__ = ['Block', 'BottleneckBlock', 'ConvBlock', 'DefaultBlock', 'DenseBlock', 'Downsample', 'MBConvBlock',
           'ResBlock', 'Upsample', 'VGGBlock']
assert __all__ == sorted(__all__)
