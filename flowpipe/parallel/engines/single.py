"""One replica: one device, or one model spread over devices (model parallel).

Both run the base loop unchanged: the pieces (micro-batch chunks) run one after another on the one module, their
gradients accumulate in place, and there is nothing to reduce or broadcast. They differ only in placement.
"""
from __future__ import annotations

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
