"""Engines: run training and prediction steps of one module as a :class:`~flowpipe.parallel.DevicePlan` says.

``base.Engine`` holds the one training loop; ``single``, ``replicas``, ``distributed`` and ``sharded`` specialize its
hooks for their placement.
"""
from .base import Engine, StepResult
from .clipping import check_clip_value, check_max_norm
from .distributed import DistributedEngine
from .replicas import ReplicaEngine
from .sharded import ShardedEngine
from .single import ModelParallelEngine, SingleEngine

__all__ = ['DistributedEngine', 'Engine', 'ModelParallelEngine', 'ReplicaEngine', 'ShardedEngine', 'SingleEngine',
           'StepResult', 'check_clip_value', 'check_max_norm']
assert __all__ == sorted(__all__)
