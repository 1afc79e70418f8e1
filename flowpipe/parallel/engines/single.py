"""One replica: one device, or one model spread over devices (model parallel).

Both run the base loop unchanged: the pieces (micro-batch chunks) run one after another on the one module, their
gradients accumulate in place, and there is nothing to reduce or broadcast. They differ only in placement.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from ..model_parallel import place_module
from ..plan import DevicePlan
from ..precision import Precision
from .base import Engine

__all__ = ['ModelParallelEngine', 'SingleEngine']


class SingleEngine(Engine):
    """Runs every step on ``module``, moved to the plan's device."""

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        device = plan.primary.device
        super().__init__(plan, [module.to(device)], [device], precision)


class ModelParallelEngine(Engine):
    """Runs every step on ``module``, whose top-level children are placed as ``plan.device_map`` says.

    Inputs go to the first device of the map; a hook on each child moves its inputs to the child's device.

    Attributes:
        placement: ``{child_name: device}`` for every top-level child.
    """

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        self.placement = place_module(module, plan)
        super().__init__(plan, [module], [plan.primary.device], precision)

    def describe(self, batch_size: int | None = None, loss: Any = None) -> str:
        """The plan's description with the placement of every part (``'auto'`` included) and its size."""
        first, *rest = self.plan.describe(batch_size, loss=loss).splitlines()
        children = dict(self.module.named_children())
        parts = []
        for name, device in self.placement.items():
            tensors = [*children[name].parameters(), *children[name].buffers()]
            size = sum(t.numel() * t.element_size() for t in tensors)
            count = sum(p.numel() for p in children[name].parameters())
            parts.append(f'  {name} on {device.name}: {count:,} parameters, {_size(size)} with buffers')
        return '\n'.join([first, *parts, *rest])


def _size(nbytes: int) -> str:
    return f'{nbytes / 1024:.1f} KiB' if nbytes < 2 ** 20 else f'{nbytes / 2 ** 20:.1f} MiB'
