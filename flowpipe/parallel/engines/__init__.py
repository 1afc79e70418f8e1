"""Engines: run training and prediction steps of one module as a :class:`~flowpipe.parallel.DevicePlan` says.

``base.Engine`` is composed from parts (see its module docstring): a placement (``placement``: one device,
replicas, model-parallel parts; a pipeline's stage in ``stage_placement``), a gradient synchronization (``sync``:
none or the in-process sum over replicas; ``ddp``: DDP's all-reduce; ``fsdp``: FSDP's reduce-scatter; ``stage_sync``:
a pipeline's stage gradients over the pipelines), a batch part
(``ranks``: one process, or the data-parallel ranks of a job) and the step recipe (``step``: micro-batches, SAM, the
non-finite check, clipping). ``single``, ``replicas``, ``distributed`` and ``sharded`` name the compositions the
plan's kinds use; ``pipeline`` runs a stage of the network on a pipeline schedule, its step the step recipe's.
"""
from .base import Engine, StepResult
from .clipping import check_clip_value, check_max_norm
from .distributed import DistributedEngine
from .pipeline import PipelineEngine
from .placement import ModelParallel, OneDevice, Placement, Replicas
from .ranks import DataRanks, OneProcess
from .replicas import ReplicaEngine
from .sharded import ShardedEngine
from .single import ModelParallelEngine, SingleEngine
from .step import StepRecipe
from .sync import GradientSync, ReplicaSum

__all__ = ['DataRanks', 'DistributedEngine', 'Engine', 'GradientSync', 'ModelParallel', 'ModelParallelEngine',
           'OneDevice', 'OneProcess', 'PipelineEngine', 'Placement', 'ReplicaEngine', 'ReplicaSum', 'Replicas',
           'ShardedEngine', 'SingleEngine', 'StepRecipe', 'StepResult', 'check_clip_value', 'check_max_norm']
assert __all__ == sorted(__all__)
