"""``Block``: layers (``MultiLayer``) or other blocks chained and repeated; ``DefaultBlock``, ``Upsample`` and
``Downsample``: blocks with batchflow's defaults for a stage body and for changing the spatial size."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..config import merge_nested as merged
from ..layers.multilayer import MultiLayer
from ..layers.shapes import as_example, remember_output, run_example

__all__ = ['Block', 'ConvBlock', 'DefaultBlock', 'Downsample', 'Upsample']


class Block(nn.Module):
    """Chained parts, the whole chain made ``n_repeats`` times.

    Without positional ``args`` one part is ``base_block(inputs=..., **kwargs)`` (``MultiLayer`` by default, so
    ``Block(inputs=x, layout='cna', channels=16)`` is a layout); with them, each item is an ``nn.Module`` used as
    it is or a dict of parameters (over ``kwargs``) for ``base_block`` (or for the item's own ``base_block``).

    Args:
        *args: parts as modules or dicts.
        inputs: an example input (a tensor, or a shape with the batch axis).
        base_block: the class that makes a part from parameters.
        n_repeats: how many times to make the chain.
        **kwargs: parameters of every part.
    """

    def __init__(self, *args: Any, inputs: Any = None, base_block: Any = MultiLayer, n_repeats: int = 1,
                 **kwargs: Any):
        super().__init__()
        x = example = as_example(inputs)
        self.parts = nn.ModuleList()
        for _ in range(int(n_repeats)):
            for item in args or [None]:
                part = self._make(item, x, base_block, kwargs)
                x = run_example(part, x)
                self.parts.append(part)
        remember_output(self, example, x)

    @staticmethod
    def _make(item: Any, x: torch.Tensor, base_block: Any, kwargs: dict) -> nn.Module:
        if item is None:
            return base_block(inputs=x, **kwargs)
        if isinstance(item, nn.Module):
            return item
        if isinstance(item, dict):
            item = dict(item)
            constructor = item.pop('base_block', None) or base_block
            return constructor(inputs=x, **merged(kwargs, item))
        raise TypeError(f"Expected the parts of a Block as nn.Modules or dicts of parameters. Received: "
                        f"{type(item).__name__} {item!r}.")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            x = part(x)
        return x


#: batchflow's earlier name of a block made from a layout
ConvBlock = Block


class DefaultBlock(Block):
    """A block with batchflow's defaults for a stage: ``layout='cna'``, ``channels='same'``, ``kernel_size=3``."""

    def __init__(self, inputs: Any = None, **kwargs: Any):
        super().__init__(inputs=inputs, **{'layout': 'cna', 'channels': 'same', 'kernel_size': 3, **kwargs})


class Upsample(Block):
    """Increase the spatial size by ``factor``: ``layout='b'`` interpolates (``scale_factor``), ``'X'`` shuffles
    channels into space, ``'t'``/``'T'`` is a transposed convolution of kernel ``2 * factor - 1`` and stride
    ``factor`` (channels ``'same'`` unless given); ``shape`` interpolates to a size instead."""

    def __init__(self, inputs: Any = None, layout: str = 'b', factor: int = 2, shape: Any = None, **kwargs: Any):
        if kwargs.get('base_block') is None:
            if 'b' in layout:
                kwargs = {'scale_factor': None if shape is not None else factor, 'shape': shape, **kwargs}
            elif 'X' in layout:
                kwargs = {'upscale_factor': factor, **kwargs}
            elif set('tT') & set(layout):
                kwargs = {'kernel_size': 2 * factor - 1, 'stride': factor, 'channels': 'same', **kwargs}
        super().__init__(inputs=inputs, layout=layout, **kwargs)


class Downsample(Block):
    """Decrease the spatial size by ``factor``: ``layout='p'``/``'v'`` pools (``pool_size`` and ``pool_stride``
    ``factor``), ``'x'`` moves space into channels, ``'c'`` is a convolution of kernel and stride ``factor``."""

    def __init__(self, inputs: Any = None, layout: str = 'p', factor: int = 2, **kwargs: Any):
        if kwargs.get('base_block') is None:
            if set('pv') & set(layout):
                kwargs = {'pool_size': factor, 'pool_stride': factor, **kwargs}
            elif 'x' in layout:
                kwargs = {'downscale_factor': factor, **kwargs}
            elif set('cC') & set(layout):
                kwargs = {'kernel_size': factor, 'stride': factor, 'channels': 'same', **kwargs}
        super().__init__(inputs=inputs, layout=layout, **kwargs)
