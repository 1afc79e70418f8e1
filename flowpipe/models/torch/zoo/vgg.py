"""VGG16 and VGG19 (Simonyan and Zisserman, 2014) as configs over the blocks: an encoder of ``VGGBlock`` stages,
each followed by a 2x2 max pooling, and a head of global average pooling, dropout and a dense layer."""
from __future__ import annotations

from ..blocks.named import VGGBlock
from ..model import TorchModel

__all__ = ['VGG16', 'VGG19']


class VGG16(TorchModel):
    """VGG16: five stages of 3x3 convolutions (``body/blocks/channels``, ``body/blocks/depth3``); every section is
    batchflow's config and can be changed (``'body/blocks/layout': 'can'``, ``'head/dropout_rate': 0.5``)."""

    DEPTHS = [2, 2, 3, 3, 3]

    @classmethod
    def default_config(cls) -> dict:
        return {'loss': 'ce',
                'body': {'type': 'encoder', 'output_type': 'tensor', 'num_stages': 5, 'order': ['block', 'downsampling'],
                         'blocks': {'base_block': VGGBlock, 'layout': 'cna', 'channels': [64, 128, 256, 512, 512],
                                    'depth3': list(cls.DEPTHS), 'depth1': 0}},
                'head': {'layout': 'Vdf', 'dropout_rate': 0.4}}


class VGG19(VGG16):
    """VGG19: as ``VGG16`` with four convolutions in each of the last three stages."""

    DEPTHS = [2, 2, 4, 4, 4]
