"""One replica: one device, or one model spread over devices (model parallel).

Both are the engine on its own with one placement part and no gradient synchronization: the pieces (micro-batch
chunks) run one after another on the one module, their gradients accumulate in place, and there is nothing to reduce
or broadcast. They differ only in placement (``placement.OneDevice``, ``placement.ModelParallel``).
"""
from __future__ import annotations

from torch import nn

from ..plan import DevicePlan
from ..precision import Precision
from ..stages import check_parameters, cut
from .base import Engine
from .placement import ModelParallel, OneDevice

__all__ = ['ModelParallelEngine', 'SingleEngine']


class SingleEngine(Engine):
    """Runs every step on ``module``, moved to the plan's device (``OneDevice``, no synchronization); a
    ``'pipeline'`` of the config is cut here as the ranks would cut it (``stages.cut``), so that a script that runs
    in one process does not fail only on the cluster."""

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        if plan.pipeline is not None:
            children = list(module.named_children())
            check_parameters(children, cut(children, plan.pipeline))
        super().__init__(plan, OneDevice(module, plan), None, precision)


class ModelParallelEngine(Engine):
    """Runs every step on ``module``, whose top-level children are placed as ``plan.device_map`` says
    (``ModelParallel``, no synchronization).

    Attributes:
        placement: ``{child_name: device}`` for every top-level child (a mapping).
    """

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        super().__init__(plan, ModelParallel(module, plan), None, precision)
