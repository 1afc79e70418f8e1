"""flowpipe.parallel: device parsing, the frozen plan, split rules and the engines that run a model's steps.

``make_plan`` owns the flags (``device``, ``microbatch``, ``device_weights``, ``device_map``, ``amp``);
``build_engine`` owns the placement; the engines own the steps. ``flowpipe.models.torch`` holds an engine.
"""
from .devices import LogicalDevice, available_devices, parse_devices
from .engines import Engine, StepResult
from .factory import build_engine
from .plan import DevicePlan, make_plan
from .split import Piece, chunk_sizes, shard_sizes, split_batch

__all__ = ['DevicePlan', 'Engine', 'LogicalDevice', 'Piece', 'StepResult', 'available_devices', 'build_engine',
           'chunk_sizes', 'make_plan', 'parse_devices', 'shard_sizes', 'split_batch']
assert __all__ == sorted(__all__)
