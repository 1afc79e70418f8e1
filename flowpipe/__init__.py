"""flowpipe: declarative batch pipelines for machine learning on PyTorch.

A ``Pipeline`` is a lazy, immutable chain of actions; named expressions (``B``, ``C``, ``V``, ``D``, ``F``,
``R``, ``I``, ``W``, ``P``, ``M``) stand for values that exist only while a batch is processed. Models live in
``flowpipe.models.torch``, open data sets in ``flowpipe.opensets``, device placement in ``flowpipe.parallel``.
"""
from .batch import Batch, ImagesBatch, action
from .config import Config
from .data import Dataset, DatasetIndex, FilesIndex
from .errors import DeviceError, ExpressionError, ModelFileError, SkipBatch, StopPipeline, UnknownActionError
from .expr import B, C, D, F, I, M, P, R, V, W, PerItem
from .pipeline import Pipeline

__all__ = ['B', 'Batch', 'C', 'Config', 'D', 'Dataset', 'DatasetIndex', 'DeviceError', 'ExpressionError', 'F',
           'FilesIndex', 'I', 'ImagesBatch', 'M', 'ModelFileError', 'P', 'PerItem', 'Pipeline', 'R', 'SkipBatch',
           'StopPipeline', 'UnknownActionError', 'V', 'W', 'action']
assert __all__ == sorted(__all__)
__version__ = '0.1.0'
