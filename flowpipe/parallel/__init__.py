"""flowpipe.parallel: device parsing, the frozen plan, split rules, precision and the engines that run a model's steps.

``make_plan`` owns the flags (``device``, ``microbatch``, ``device_weights``, ``device_map``, ``amp``) and picks
the engine kind; ``build_engine`` owns the placement (through the ``ENGINES`` registry); the engines own the steps
(one loop in ``Engine``), holding a ``Precision`` for autocast and loss scaling. ``flowpipe.models.torch`` holds
an engine.
"""
from . import distributed
from .devices import LogicalDevice, available_devices, parse_devices
from .distributed import World
from .engines import Engine, StepResult
from .factory import ENGINES, build_engine
from .launcher import LaunchError, launch
from .losses import NormalizedLoss, TorchLoss
from .mesh import Mesh
from .plan import DevicePlan, make_plan
from .precision import MixedPrecision, Precision, make_precision
from .split import Piece, chunk_sizes, shard_sizes, split_batch

__all__ = ['DevicePlan', 'ENGINES', 'Engine', 'LaunchError', 'LogicalDevice', 'Mesh', 'MixedPrecision', 'NormalizedLoss', 'Piece', 'Precision',
           'StepResult', 'TorchLoss', 'World', 'available_devices', 'build_engine', 'chunk_sizes', 'distributed', 'launch',
           'make_plan', 'make_precision', 'parse_devices', 'shard_sizes', 'split_batch']
assert __all__ == sorted(__all__)
