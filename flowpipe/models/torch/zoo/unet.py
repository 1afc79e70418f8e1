"""Encoder-decoder networks for segmentation as configs over the blocks: ``EncoderDecoder`` (any encoder,
embedding and decoder), ``UNet`` (Ronneberger et al., 2015) and its residual and dense variants.

The parts are ``initial_block``, ``encoder`` (stages of a block, a skip and a 2x2 max pooling), ``embedding``,
``decoder`` (stages of an upsampling, the join with the skip of the same size, a block) and ``head`` (a 1x1
convolution to the classes, or to the first axis of the targets' shape). Each stage's ``channels`` are one list
item; ``'encoder/num_stages'`` with lists of that length changes the depth.
"""
from __future__ import annotations

from ..blocks.named import DenseBlock, ResBlock
from ..model import TorchModel

__all__ = ['DenseUNet', 'EncoderDecoder', 'ResUNet', 'UNet']

_ORDER = ['initial_block', 'encoder', 'embedding', 'decoder', 'head']


def _sections(encoder: dict, embedding: dict, decoder: dict, stages: int) -> dict:
    return {'loss': 'ce', 'order': list(_ORDER),
            'encoder': {'type': 'encoder', 'num_stages': stages, 'order': ['block', 'skip', 'downsampling'],
                        'blocks': encoder},
            'embedding': {'input_type': 'list', 'output_type': 'list', **embedding},
            'decoder': {'type': 'decoder', 'num_stages': stages, 'order': ['upsampling', 'combine', 'block'],
                        'blocks': decoder},
            'head': {'layout': 'c', 'kernel_size': 1}}


class EncoderDecoder(TorchModel):
    """A small encoder-decoder: three stages of ``'cna'`` blocks (16, 32, 64 channels), an embedding of 128, a
    decoder back to full size joined with the encoder's skips. Change any section (``'encoder/blocks'``,
    ``'decoder/upsample'``: ``{'layout': 't'}`` for transposed convolutions...)."""

    @classmethod
    def default_config(cls) -> dict:
        return _sections({'layout': 'cna', 'channels': [16, 32, 64]}, {'layout': 'cna', 'channels': 128},
                         {'layout': 'cna', 'channels': [64, 32, 16]}, 3)


class UNet(TorchModel):
    """UNet: four stages of two 3x3 conv-norm-activation (64 to 512 channels), an embedding of 1024, a decoder of
    bilinear upsampling, concatenation with the skip and two conv-norm-activation (512 to 64)."""

    @classmethod
    def default_config(cls) -> dict:
        return _sections({'layout': 'cna cna', 'channels': [64, 128, 256, 512]},
                         {'layout': 'cna cna', 'channels': 1024},
                         {'layout': 'cna cna', 'channels': [512, 256, 128, 64]}, 4)


class ResUNet(UNet):
    """UNet with a residual block (``ResBlock``, ``'cna'`` beside a shortcut) in every stage."""

    @classmethod
    def default_config(cls) -> dict:
        config = super().default_config()
        for part in ('encoder', 'decoder'):
            config[part]['blocks'].update(base_block=ResBlock, layout='cna')
        return config


class DenseUNet(UNet):
    """UNet with dense blocks: the encoder's keep their input (``skip=True``), the decoder's give only the new
    channels; ``growth_rate`` and ``num_layers`` per stage set the widths."""

    @classmethod
    def default_config(cls) -> dict:
        config = super().default_config()
        config['encoder']['blocks'] = {'base_block': DenseBlock, 'layout': 'nacd', 'num_layers': 4,
                                       'growth_rate': [16, 32, 64, 128], 'skip': True}
        config['decoder']['blocks'] = {'base_block': DenseBlock, 'layout': 'nacd', 'num_layers': 4,
                                       'growth_rate': [128, 64, 32, 16], 'skip': False}
        return config
