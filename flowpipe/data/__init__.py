"""Item indices and datasets: ``DatasetIndex``, ``FilesIndex``, ``Dataset``."""
from .dataset import Dataset
from .files import FilesIndex
from .index import DatasetIndex

__all__ = ['Dataset', 'DatasetIndex', 'FilesIndex']
