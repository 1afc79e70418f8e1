"""The model config keys read into a model's device plan, in one place (torch-free: the pipeline side reads them
before any model is built).

``PLAN_KEYS`` are passed to ``flowpipe.parallel.make_plan`` as they are, by ``TorchModel`` and by a declared model's
``PendingModel.device_plan``; ``pin_memory`` is given beside them (its default is ``'auto'``, not ``None``).
A key read into the plan is added here, and every reader follows.
"""
from __future__ import annotations

__all__ = ['PLACEMENT_KEYS', 'PLAN_KEYS']

#: keys passed to ``make_plan`` as they are (``None`` when absent)
PLAN_KEYS = ('device', 'microbatch', 'device_weights', 'device_map', 'amp', 'memory_format', 'compile', 'sharding',
             'sharding_units', 'sharding_group', 'sharding_offload', 'randomness', 'pipeline', 'pipeline_split',
             'pipeline_schedule')
#: every key that decides placement: the plan's keys and ``pin_memory``
PLACEMENT_KEYS = (*PLAN_KEYS, 'pin_memory')
