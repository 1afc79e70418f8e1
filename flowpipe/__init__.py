"""flowpipe: declarative batch pipelines for machine learning on PyTorch."""
from .errors import DeviceError, ModelFileError, SkipBatch, StopPipeline

__all__ = ['DeviceError', 'ModelFileError', 'SkipBatch', 'StopPipeline']
__version__ = '0.1.0'
