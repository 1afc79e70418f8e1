"""Engines: run training and prediction steps of one module as a :class:`~flowpipe.parallel.DevicePlan` says.

``base.Engine`` holds the one training loop; ``single``, ``replicas``, ``distributed`` and ``sharded`` specialize its
hooks for their placement. ``pipeline`` runs a stage of the network on a pipeline schedule, its placement a part of its
own (``stage_placement``).
"""
from .base import Engine, StepResult
from .clipping import check_clip_value, check_max_norm
from .distributed import DistributedEngine
from .pipeline import PipelineEngine
from .replicas import ReplicaEngine
from .sharded import ShardedEngine
from .single import ModelParallelEngine, SingleEngine

__all__ = ['DistributedEngine', 'Engine', 'ModelParallelEngine', 'PipelineEngine', 'ReplicaEngine', 'ShardedEngine',
           'SingleEngine', 'StepResult', 'check_clip_value', 'check_max_norm']
assert __all__ == sorted(__all__)
