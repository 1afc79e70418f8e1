"""ResNet50/101/152 (He et al., 2015), ResNeXt (Xie et al., 2016) and squeeze-and-excitation variants (Hu et al.,
2017) as configs over the blocks: a 7x7 stride-2 convolution and a max pooling, an encoder of four stages of
residual blocks (the first block of stages 2-4 halves the size), global average pooling and a dense layer.

``ResNet18``/``ResNet34`` (``flowpipe.models.torch.ready``) are flowpipe's own networks; ``SEResNet18``/``34``
here are the basic-block layout with squeeze and excitation, ``ResNeXt18``/``34`` (and their SE variants) the
basic-block layout with 32 groups, as batchflow's.
"""
from __future__ import annotations

from typing import Any, ClassVar

from ..blocks.named import BottleneckBlock, ResBlock
from ..model import TorchModel

__all__ = ['ResNeXt101', 'ResNeXt152', 'ResNeXt18', 'ResNeXt34', 'ResNeXt50', 'ResNet101', 'ResNet152', 'ResNet50',
           'SEResNeXt101', 'SEResNeXt152', 'SEResNeXt18', 'SEResNeXt34', 'SEResNeXt50', 'SEResNet101', 'SEResNet152',
           'SEResNet18', 'SEResNet34', 'SEResNet50']


class _ResNetLayout(TorchModel):
    """A ResNet by layout: ``body/blocks`` holds the block class, the stage widths (``channels``), the blocks per
    stage (``n_reps``), ``groups`` and ``attention``."""

    REPS: ClassVar[list[int]] = [3, 4, 6, 3]
    BLOCK: ClassVar[Any] = BottleneckBlock
    WIDTHS: ClassVar[list[int]] = [256, 512, 1024, 2048]
    OPTIONS: ClassVar[dict] = {}

    @classmethod
    def default_config(cls) -> dict:
        blocks = {'base_block': cls.BLOCK, 'channels': list(cls.WIDTHS), 'n_reps': list(cls.REPS),
                  'downsample': [False, True, True, True], **cls.OPTIONS}
        return {'loss': 'ce',
                'initial_block': {'layout': 'cnap', 'channels': 64, 'kernel_size': 7, 'stride': 2, 'pool_size': 3,
                                  'pool_stride': 2},
                'body': {'type': 'encoder', 'output_type': 'tensor', 'num_stages': 4, 'order': ['block'],
                         'blocks': blocks},
                'head': {'layout': 'Vf'}}


def _variant(name: str, reps: list[int], block: Any = BottleneckBlock, widths: list[int] | None = None,
             **options: Any) -> type:
    doc = (f"{name}: stages of {reps} {block.__name__}s"
           + (f" with {options}" if options else '') + "; batchflow's sections, all of them changeable.")
    return type(name, (_ResNetLayout,), {'REPS': reps, 'BLOCK': block, 'WIDTHS': widths or _ResNetLayout.WIDTHS,
                                         'OPTIONS': options, '__doc__': doc, '__module__': __name__})


_NEXT = {'groups': 32, 'bottleneck': 2}
_SE = {'attention': 'se'}
_BASIC = dict(block=ResBlock, widths=[64, 128, 256, 512])
ResNet50 = _variant('ResNet50', [3, 4, 6, 3])
ResNet101 = _variant('ResNet101', [3, 4, 23, 3])
ResNet152 = _variant('ResNet152', [3, 8, 36, 3])
ResNeXt50 = _variant('ResNeXt50', [3, 4, 6, 3], **_NEXT)
ResNeXt101 = _variant('ResNeXt101', [3, 4, 23, 3], **_NEXT)
ResNeXt152 = _variant('ResNeXt152', [3, 8, 36, 3], **_NEXT)
ResNeXt18 = _variant('ResNeXt18', [2, 2, 2, 2], **_BASIC, groups=32)
ResNeXt34 = _variant('ResNeXt34', [3, 4, 6, 3], **_BASIC, groups=32)
SEResNeXt18 = _variant('SEResNeXt18', [2, 2, 2, 2], **_BASIC, groups=32, **_SE)
SEResNeXt34 = _variant('SEResNeXt34', [3, 4, 6, 3], **_BASIC, groups=32, **_SE)
SEResNet18 = _variant('SEResNet18', [2, 2, 2, 2], **_BASIC, **_SE)
SEResNet34 = _variant('SEResNet34', [3, 4, 6, 3], **_BASIC, **_SE)
SEResNet50 = _variant('SEResNet50', [3, 4, 6, 3], **_SE)
SEResNet101 = _variant('SEResNet101', [3, 4, 23, 3], **_SE)
SEResNet152 = _variant('SEResNet152', [3, 8, 36, 3], **_SE)
SEResNeXt50 = _variant('SEResNeXt50', [3, 4, 6, 3], **_NEXT, **_SE)
SEResNeXt101 = _variant('SEResNeXt101', [3, 4, 23, 3], **_NEXT, **_SE)
SEResNeXt152 = _variant('SEResNeXt152', [3, 8, 36, 3], **_NEXT, **_SE)
