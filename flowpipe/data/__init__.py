"""Item indices and datasets: ``DatasetIndex``, ``FilesIndex``, ``Dataset``, ``ImageFolder``, token data
(``TokenWindows``, ``TokenSequences``, ``open_tokens``), and ``make_rng`` for shuffling."""
from .dataset import Dataset
from .files import FilesIndex
from .image_folder import ImageFolder
from .index import DatasetIndex
from .sampling import make_rng
from .token_files import open_tokens
from .tokens import TokenSequences, TokenWindows

__all__ = ['Dataset', 'DatasetIndex', 'FilesIndex', 'ImageFolder', 'TokenSequences', 'TokenWindows', 'make_rng',
           'open_tokens']
