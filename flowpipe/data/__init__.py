"""Item indices and datasets: ``DatasetIndex``, ``FilesIndex``, ``Dataset``, and ``make_rng`` for shuffling."""
from .dataset import Dataset
from .files import FilesIndex
from .index import DatasetIndex
from .sampling import make_rng

__all__ = ['Dataset', 'DatasetIndex', 'FilesIndex', 'make_rng']
