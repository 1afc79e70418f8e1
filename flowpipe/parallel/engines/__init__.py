"""Engines: run training and prediction steps of one module as a :class:`~flowpipe.parallel.DevicePlan` says."""
from .base import Engine, StepResult
from .replicas import ReplicaEngine
from .single import SingleEngine

__all__ = ['Engine', 'ReplicaEngine', 'SingleEngine', 'StepResult']
assert __all__ == sorted(__all__)
