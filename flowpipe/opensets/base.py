"""What every open data set shares: where its files live, and its ``train`` / ``test`` datasets.

An open set loads its publisher's files once, into memory, and exposes two ``Dataset``s of ``ImagesBatch``
(``images`` and ``labels`` components). ``num_classes`` and ``classes`` are both attributes of the open set and
dataset attributes of ``train`` / ``test``, so ``D.num_classes`` works in a pipeline bound to either.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ['Openset', 'data_folder']


def data_folder(name: str, path: str | os.PathLike | None = None) -> Path:
    """Return the folder an open set reads from and downloads into.

    Args:
        name: the set's folder name, e.g. ``'mnist'``.
        path: an explicit folder; when ``None``, ``$FLOWPIPE_DATA/<name>`` if that variable is set, else
            ``~/.cache/flowpipe/<name>``.
    """
    if path is not None:
        return Path(path).expanduser()
    root = os.environ.get('FLOWPIPE_DATA')
    return (Path(root).expanduser() if root else Path.home() / '.cache' / 'flowpipe') / name


class Openset:
    """Base of the open data sets: subclasses implement ``_load`` and set ``name`` and ``classes``.

    Args:
        path: the folder with the publisher's files (see ``data_folder`` for the default).
        bar: show a progress bar while files are downloaded and read.

    Attributes:
        train: the training ``Dataset``.
        test: the test ``Dataset``.
        num_classes: the number of classes.
        classes: class names, ``classes[label]`` names a label.
        path: the folder the files were read from.
    """
    name: str = ''
    classes: tuple[str, ...] = ()

    def __init__(self, path: str | os.PathLike | None = None, bar: bool = False):
        self.path = data_folder(self.name, path)
        self.bar = bool(bar)
        splits = self._load()
        self.train = self._make_dataset(*splits['train'])
        self.test = self._make_dataset(*splits['test'])

    @property
    def num_classes(self) -> int:
        """The number of classes."""
        return len(self.classes)

    def _load(self) -> dict[str, tuple[Any, np.ndarray]]:
        """Return ``{'train': (images, labels), 'test': (images, labels)}``."""
        raise NotImplementedError

    def _make_dataset(self, images: Any, labels: np.ndarray) -> Any:
        # Imported here so that the open sets module stays importable on its own while flowpipe.data and
        # flowpipe.batch are being built, and to keep import of flowpipe.opensets cheap.
        from ..batch.images import ImagesBatch
        from ..data import Dataset, DatasetIndex
        labels = np.asarray(labels, dtype=np.int64)
        return Dataset(DatasetIndex(len(labels)), batch_class=ImagesBatch,
                       preloaded={'images': images, 'labels': labels},
                       num_classes=self.num_classes, classes=self.classes)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(train={len(self.train)}, test={len(self.test)}, "
                f"num_classes={self.num_classes}, path={str(self.path)!r})")
