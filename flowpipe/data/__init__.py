"""Item indices and datasets: ``DatasetIndex``, ``FilesIndex``, ``Dataset``, ``ImageFolder``, and ``make_rng``
for shuffling."""
from .dataset import Dataset
from .files import FilesIndex
from .image_folder import ImageFolder
from .index import DatasetIndex
from .sampling import make_rng

__all__ = ['Dataset', 'DatasetIndex', 'FilesIndex', 'ImageFolder', 'make_rng']
