"""Engines: run training and prediction steps of one module as a :class:`~flowpipe.parallel.DevicePlan` says."""
from .base import Engine, StepResult
from .single import SingleEngine

__all__ = ['Engine', 'SingleEngine', 'StepResult']
