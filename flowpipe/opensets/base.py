"""What every open data set shares: where its files live, and how its splits become one ``Dataset``.

An open set loads its publisher's files once, into memory, and IS a ``Dataset`` of ``ImagesBatch`` (``images``
and ``labels`` components) over all its items, train items first, then test items. ``train`` and ``test`` are
subsets of it that share its one preloaded store: ``preloaded`` is that whole store, and ``images`` and ``labels``
(``component(name)``) are a set's own items. ``num_classes`` and ``classes`` are dataset attributes, so
``D.num_classes`` works in a pipeline bound to the whole set or to either split.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..data import Dataset
from ..data.arrays import as_item_array, object_array

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


class Openset(Dataset):
    """Base of the open data sets: subclasses implement ``_load`` and set ``name`` and ``CLASSES``.

    The whole set is a ``Dataset`` (``len``, ``p``, ``next_batch``, ``pipeline``) whose item ids are
    ``0 .. len - 1``: the train items, then the test items.

    Args:
        path: the folder with the publisher's files (see ``data_folder`` for the default).
        bar: show a progress bar while files are downloaded and read (batchflow's ``'t'``/``'n'`` work too).
        batch_class: the class of its batches, ``ImagesBatch`` or a subclass of it (the default).

    Attributes:
        images, labels: this set's items in index order (a view of the shared store where it can be); for
            ``train`` or ``test`` their items only, while ``preloaded`` is the whole store.
        train: the training items, a subset sharing this set's data (``create_subset``).
        test: the test items, likewise.
        num_classes: the number of classes, ``len(classes)``.
        classes: class names, ``classes[label]`` names a label.
        path: the folder the files were read from.
        bar: whether progress bars are shown.

    Raises:
        TypeError: a subclass declares ``classes`` or ``num_classes`` on the class instead of ``CLASSES``.
    """
    name: str = ''
    CLASSES: tuple[str, ...] = ()

    def __init__(self, path: str | os.PathLike | None = None, bar: Any = False, batch_class: type | None = None):
        from ..batch.images import ImagesBatch  # flowpipe.batch imports flowpipe.data: keep this import lazy
        batch_class = ImagesBatch if batch_class is None else batch_class
        if not (isinstance(batch_class, type) and issubclass(batch_class, ImagesBatch)):
            raise TypeError(f"Expected batch_class to be ImagesBatch or a subclass of it: an open set's items are "
                            f"images and labels. Received: batch_class={batch_class!r}")
        for taken in ('classes', 'num_classes'):
            if hasattr(type(self), taken):
                raise TypeError(f"Expected {type(self).__name__} to declare its class names as CLASSES. Received: "
                                f"a class attribute {taken!r}, which would hide the dataset attribute; rename "
                                "it to CLASSES (num_classes follows from it)")
        self.path = data_folder(self.name, path)
        self.bar = bool(bar)
        splits = self._load()
        n_train = len(splits['train'][1])
        preloaded = _join_splits(splits)
        del splits  # the per-split arrays go now: only the joined store stays
        classes = tuple(self.CLASSES)
        super().__init__(len(preloaded['labels']), batch_class=batch_class, preloaded=preloaded,
                         num_classes=len(classes), classes=classes)
        self.train = self.create_subset(np.arange(n_train))
        self.test = self.create_subset(np.arange(n_train, len(self)))
        self.index.train, self.index.test = self.train.index, self.test.index

    def _load(self) -> dict[str, tuple[Any, np.ndarray]]:
        """Return ``{'train': (images, labels), 'test': (images, labels)}``."""
        raise NotImplementedError

    @property
    def images(self) -> Any:
        """This set's images in index order: for ``train`` or ``test`` only theirs (``component('images')``)."""
        return self.component('images')

    @property
    def labels(self) -> np.ndarray:
        """This set's labels in index order: for ``train`` or ``test`` only theirs (``component('labels')``)."""
        return self.component('labels')

    def __repr__(self) -> str:
        parts = [f'size={len(self)}']
        if self.train is not None and self.test is not None:
            parts += [f'train={len(self.train)}', f'test={len(self.test)}']
        parts += [f'num_classes={self.num_classes}', f'path={str(self.path)!r}']
        return f"{type(self).__name__}({', '.join(parts)})"


def _join_splits(splits: dict[str, tuple[Any, np.ndarray]]) -> dict[str, Any]:
    """One store for all items, train first: ``{'images': ..., 'labels': int64 array}``."""
    (train_images, train_labels), (test_images, test_labels) = splits.pop('train'), splits.pop('test')
    labels = np.concatenate([np.asarray(train_labels, dtype=np.int64), np.asarray(test_labels, dtype=np.int64)])
    del train_labels, test_labels
    images = _concatenate(as_item_array(train_images, name='train images'),
                          as_item_array(test_images, name='test images'))
    return {'images': images, 'labels': labels}


def _concatenate(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    # Images of one shape stack into one array; otherwise (e.g. Imagenette's differently sized images) the
    # result stays a 1-D object array of per-image arrays, as each split was.
    same_layout = first.dtype == second.dtype and first.shape[1:] == second.shape[1:]
    if same_layout and (first.dtype != object or first.ndim == 1):
        return np.concatenate([first, second])
    return object_array([*first, *second])
