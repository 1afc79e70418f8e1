"""Side branches: ``R``/``B`` start one (``Branch``), ``+``, ``|``, ``*`` join it to the main flow (``Combine``);
``S`` is a squeeze-and-excitation attention (``SelfAttention``)."""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.nn import functional

from .shapes import as_example, num_channels

__all__ = ['Branch', 'Combine', 'SelfAttention']

#: batchflow's names of the join operations -> the canonical one
OPS = {'+': 'sum', 'sum': 'sum', 'plus': 'sum', '|': 'concat', 'concat': 'concat', 'cat': 'concat',
       '*': 'mul', 'mul': 'mul', 'multi': 'mul', 'mean': 'mean', 'avg': 'mean', 'average': 'mean'}


class Combine(nn.Module):
    """Join tensors: sum, concatenation along channels, product or mean.

    Tensors of another spatial size than the leading one are resized to it (nearest); the sum, product and mean
    need the same channels.

    Args:
        inputs: example tensors (or shapes), the stored branch first and the main flow last.
        op: ``'+'``/``'sum'``, ``'|'``/``'concat'``, ``'*'``/``'mul'``, ``'mean'``, or a callable on the list.
        leading_index: which tensor gives the spatial size and comes first in a concatenation.
    """

    def __init__(self, inputs: Sequence[Any] | None = None, op: str | Callable = 'concat', leading_index: int = 0):
        super().__init__()
        if not callable(op) and op not in OPS:
            raise ValueError(f"Expected a join operation among {sorted(OPS)} or a callable. Received: op={op!r}.")
        self.op, self.leading_index = (op if callable(op) else OPS[op]), int(leading_index)
        if inputs is not None and self.op in ('sum', 'mul', 'mean'):
            channels = [num_channels(as_example(item)) for item in inputs]
            if len(set(channels)) > 1:
                raise ValueError(f"Expected tensors of the same channels to {self.op}. Received: channels {channels}. "
                                 "Give the branch a layout that makes them equal (e.g. 'R' with branch={'layout': "
                                 "'cn', 'channels': ...}) or concatenate them with '|'.")

    def forward(self, inputs: list[torch.Tensor]) -> torch.Tensor:
        if callable(self.op):
            return self.op(inputs)
        inputs = list(inputs)
        lead = inputs.pop(self.leading_index)
        inputs = [lead, *(_resized(item, lead.shape[2:]) for item in inputs)]
        if self.op == 'concat':
            return torch.cat(inputs, dim=1)
        result = inputs[0]
        for item in inputs[1:]:
            result = result * item if self.op == 'mul' else result + item
        return result / len(inputs) if self.op == 'mean' else result


def _resized(tensor: torch.Tensor, spatial: torch.Size) -> torch.Tensor:
    if tensor.shape[2:] == spatial:
        return tensor
    return functional.interpolate(tensor, size=tuple(spatial), mode='nearest')


class Branch(nn.Module):
    """A side branch (letters ``R`` and ``B``): the identity, or a block made of ``branch``'s parameters (a
    ``layout`` and its parameters, or a ``base_block``), e.g. a 1x1 convolution on a residual shortcut."""

    def __init__(self, inputs: Any = None, **kwargs: Any):
        super().__init__()
        if kwargs.get('layout') or kwargs.get('base_block'):
            from ..blocks.core import Block        # blocks are made of layers: imported when a branch has one
            self.layer: nn.Module = Block(inputs=inputs, **kwargs)
        else:
            self.layer = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class SelfAttention(nn.Module):
    """Squeeze and excitation (letter ``S``): channels rescaled by a gate computed from their global mean.

    Args:
        inputs: an example input.
        attention: ``'se'`` or ``True`` (the one attention read here).
        ratio: the channel reduction inside the gate.
    """

    def __init__(self, inputs: Any = None, attention: Any = 'se', ratio: int = 4):
        super().__init__()
        if attention not in ('se', True, 'squeeze_excitation'):
            raise ValueError(f"Expected attention='se' (squeeze and excitation) for the layout letter 'S'. "
                             f"Received: attention={attention!r}.")
        channels = num_channels(as_example(inputs))
        inner = max(channels // int(ratio), 1)
        self.reduce = nn.Linear(channels, inner)
        self.expand = nn.Linear(inner, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.expand(torch.relu(self.reduce(x.flatten(2).mean(dim=2)))))
        return x * gate.reshape(*gate.shape, *([1] * (x.dim() - 2)))
