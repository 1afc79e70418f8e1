"""``build_engine``: the one place that turns a plan and a module into the engine that runs it."""
from __future__ import annotations

from torch import nn

from .engines import Engine, ReplicaEngine, SingleEngine
from .model_parallel import place_module
from .plan import DevicePlan

__all__ = ['build_engine']


def build_engine(module: nn.Module, plan: DevicePlan) -> Engine:
    """Place ``module`` (and its replicas) as ``plan`` says and return the engine that runs its steps.

    Single device: the module is moved there. Replicas: the module becomes the primary replica and deep
    copies go to the other devices (call ``engine.close()`` when done, to stop its threads). Model parallel:
    the module's top-level children are moved to their devices and hooked to receive their inputs there.
    Build the optimizer on ``engine.parameters()`` after this call: placing moves the parameters.

    Raises:
        TypeError: ``module`` is not an ``nn.Module`` or ``plan`` not a ``DevicePlan``.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f'Expected an nn.Module. Received: {module!r} of type {type(module).__name__}.')
    if not isinstance(plan, DevicePlan):
        raise TypeError(f'Expected a DevicePlan from make_plan(...). Received: {plan!r} of type '
                        f'{type(plan).__name__}.')
    if plan.mode == 'replicas':
        return ReplicaEngine(module, plan)
    if plan.mode == 'model_parallel':
        return SingleEngine(module, plan, placement=place_module(module, plan))
    return SingleEngine(module, plan)
