"""``build_engine``: the one place that turns a plan and a module into the engine that runs it.

``ENGINES`` is the registry from a plan's ``engine`` kind to the class that runs it; every class is built as
``engine_class(module, plan, precision)`` and composes the engine from its parts (a placement, a gradient
synchronization, a batch part: ``flowpipe.parallel.engines``). A new way of running steps is a new part, the class
that composes it and one entry here (and the rule in ``make_plan`` that chooses its kind).
"""
from __future__ import annotations

from torch import nn

from .engines import (DistributedEngine, Engine, ModelParallelEngine, PipelineEngine, ReplicaEngine, ShardedEngine,
                      SingleEngine)
from .plan import DISTRIBUTED, MODEL_PARALLEL, PIPELINE, REPLICAS, SHARDED, SINGLE, DevicePlan
from .precision import make_precision

__all__ = ['ENGINES', 'build_engine']

ENGINES: dict[str, type[Engine]] = {
    SINGLE: SingleEngine,
    REPLICAS: ReplicaEngine,
    MODEL_PARALLEL: ModelParallelEngine,
    DISTRIBUTED: DistributedEngine,
    SHARDED: ShardedEngine,
    PIPELINE: PipelineEngine,
}


def build_engine(module: nn.Module, plan: DevicePlan) -> Engine:
    """Place ``module`` (and its replicas) as ``plan`` says and return the engine that runs its steps.

    Single device: the module is moved there. Replicas: the module becomes the primary replica and deep
    copies go to the other devices (call ``engine.close()`` when done, to stop its threads). Model parallel:
    the module's top-level children are moved to their devices and hooked to receive their inputs there.
    Build the optimizer on ``engine.parameters()`` after this call: placing moves the parameters.

    Raises:
        TypeError: ``module`` is not an ``nn.Module`` or ``plan`` not a ``DevicePlan``.
        ValueError: ``plan.engine`` is not a registered kind.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f'Expected an nn.Module. Received: {module!r} of type {type(module).__name__}.')
    if not isinstance(plan, DevicePlan):
        raise TypeError(f'Expected a DevicePlan from make_plan(...). Received: {plan!r} of type '
                        f'{type(plan).__name__}.')
    engine_class = ENGINES.get(plan.engine)
    if engine_class is None:
        raise ValueError(f'Expected plan.engine among the registered engine kinds {sorted(ENGINES)}. Received: '
                         f'engine={plan.engine!r}. Build the plan with make_plan(...), or add the kind to '
                         f'flowpipe.parallel.factory.ENGINES.')
    return engine_class(module, plan, make_precision(plan))
