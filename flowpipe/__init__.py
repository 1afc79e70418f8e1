"""flowpipe: declarative batch pipelines for machine learning on PyTorch.

A ``Pipeline`` is a lazy, immutable chain of actions; named expressions (``B``, ``C``, ``V``, ``D``, ``F``,
``R``, ``I``, ``W``, ``P``, ``M``, and batchflow's ``L`` and ``PP``) stand for values that exist only while a batch is
processed. Models live in
``flowpipe.models.torch``, open data sets in ``flowpipe.opensets``, device placement in ``flowpipe.parallel``.
"""
from .batch import Batch, ImagesBatch, action, apply_parallel
from .config import Config
from .data import Dataset, DatasetIndex, FilesIndex, ImageFolder, make_rng
from .errors import (CheckpointError, DeviceError, ExpressionError, FolderInUseError, LaunchError, ModelFileError,
                     RunStopped, SkipBatch, StopPipeline, UnknownActionError, UnsafeFileError)
from .execution.checkpoint import Checkpoint
from .execution.deterministic import deterministic
from .expr import PP, B, C, D, F, I, L, M, P, R, V, W, PerItem, save_data_to
from .gpus import set_gpus
from .pipeline import Pipeline
from .plotter import Plot, plot
from .sampler import ConstantSampler, HistoSampler, NumpySampler, Sampler, ScipySampler
from .progress import CPUMonitor, MemoryMonitor, Notifier, ResourceMonitor, notifier
from .rank0 import is_main, print0
from .transforms import Normalizer, Quantizer

Monitor = ResourceMonitor  # batchflow's name for the resource monitor (flowpipe.progress.Monitor is the bar's)

__all__ = ['B', 'Batch', 'C', 'CPUMonitor', 'Checkpoint', 'CheckpointError', 'Config', 'ConstantSampler', 'D',
           'Dataset', 'DatasetIndex', 'DeviceError', 'ExpressionError', 'F', 'FilesIndex', 'FolderInUseError',
           'HistoSampler', 'I', 'ImageFolder', 'ImagesBatch', 'L', 'LaunchError', 'M', 'MemoryMonitor',
           'ModelFileError', 'Monitor', 'Normalizer', 'Notifier', 'NumpySampler', 'P', 'PP', 'PerItem', 'Pipeline', 'Plot', 'Quantizer', 'R',
           'ResourceMonitor', 'RunStopped', 'Sampler', 'ScipySampler', 'SkipBatch', 'StopPipeline',
           'UnknownActionError', 'UnsafeFileError', 'V', 'W', 'action', 'apply_parallel', 'deterministic', 'is_main',
           'make_rng', 'notifier', 'plot', 'print0', 'save_data_to', 'set_gpus']
assert __all__ == sorted(__all__)
__version__ = '0.1.0'
