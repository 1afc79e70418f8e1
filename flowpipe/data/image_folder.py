"""``ImageFolder``: a labelled dataset of image files laid out as ``root/<class>/<file>`` (torchvision's layout)."""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from .dataset import Dataset
from .files import FilesIndex

__all__ = ['IMAGE_EXTENSIONS', 'ImageFolder']

#: the file extensions ``ImageFolder`` takes by default (torchvision's, in any case)
IMAGE_EXTENSIONS = ('.bmp', '.jpeg', '.jpg', '.pgm', '.png', '.ppm', '.tif', '.tiff', '.webp')


class ImageFolder(Dataset):
    """The image files under ``root/<class>/``, labelled by their class folder, as torchvision's ``ImageFolder``.

    A ``Dataset`` of ``ImagesBatch`` over a ``FilesIndex`` whose ids are the paths below ``root`` (``'cat/001.png'``,
    ``/`` on every system), in sorted order. Labels are a preloaded ``labels`` component (int64, the class's place in
    ``classes``); images are read by the pipeline's ``load()`` action, batch by batch, never all at once. Files in
    folders below a class folder belong to that class, as in torchvision; names starting with ``.`` (hidden files and
    folders, ``.ipynb_checkpoints``) are skipped.

    Args:
        root: the folder holding one folder per class.
        classes: the class folders to take, in label order; by default every folder of ``root``, sorted. Pass the
            ``classes`` of a training folder to label a validation folder the same way.
        extensions: the file extensions taken (compared in lower case); other files are skipped.
        batch_class: ``ImagesBatch`` or a subclass of it (the default).
        **attributes: more dataset attributes (read by ``D``).

    Attributes:
        classes: the class names, ``classes[label]`` names a label.
        num_classes: ``len(classes)``.
        class_to_idx: ``{class name: label}``.
        labels: this set's labels in index order (``component('labels')``).

    Raises:
        FileNotFoundError: ``root`` is not a folder, or it holds no class folder.
        ValueError: a class of ``classes`` has no folder, or a class folder has no image file.
    """

    def __init__(self, root: str | os.PathLike, classes: Sequence[str] | None = None,
                 extensions: Sequence[str] = IMAGE_EXTENSIONS, batch_class: type | None = None, **attributes: Any):
        if batch_class is None:
            from flowpipe.batch import ImagesBatch  # batch imports data, so data imports batch only when used
            batch_class = ImagesBatch
        root = os.fspath(root)
        classes = _classes(root, classes)
        paths = _image_files(root, classes, tuple(extension.lower() for extension in extensions))
        ids = sorted(paths)
        label_of = {name: label for label, name in enumerate(classes)}
        labels = np.array([label_of[item.split('/', 1)[0]] for item in ids], dtype=np.int64)
        super().__init__(FilesIndex(index=ids, paths=paths), batch_class=batch_class,
                         preloaded={'labels': labels}, classes=classes, num_classes=len(classes),
                         class_to_idx=label_of, root=root, **attributes)

    @property
    def labels(self) -> np.ndarray:
        """This set's labels in index order (a split's own)."""
        return self.component('labels')


def _classes(root: str, classes: Sequence[str] | None) -> tuple[str, ...]:
    if not os.path.isdir(root):
        raise FileNotFoundError(f"Expected a folder of class folders (root/<class>/<image>). Received: root={root!r}, "
                                "which is not a folder; check the path")
    found = sorted(entry.name for entry in os.scandir(root) if entry.is_dir() and not entry.name.startswith('.'))
    if classes is None:
        if not found:
            raise FileNotFoundError(f"Expected class folders in {root!r} (root/<class>/<image>). Received: a folder "
                                    "without sub-folders; put each class's images in a folder of its own")
        return tuple(found)
    if isinstance(classes, str) or not all(isinstance(name, str) for name in classes):
        raise TypeError(f"Expected classes as a list of folder names. Received: classes={classes!r}")
    missing = [name for name in classes if name not in found]
    if missing:
        raise ValueError(f"Expected a folder in {root!r} for every class of classes. Received: no folder for "
                         f"{missing[:5]!r} (folders: {found[:10]!r}); fix classes= or the folders")
    return tuple(classes)


def _image_files(root: str, classes: tuple[str, ...], extensions: tuple[str, ...]) -> dict[str, str]:
    """``{id: path}`` of the image files below each class folder (ids: paths below ``root`` with ``/``)."""
    paths, empty = {}, []
    for name in classes:
        before = len(paths)
        for folder, subfolders, files in os.walk(os.path.join(root, name), followlinks=True):
            subfolders[:] = [sub for sub in subfolders if not sub.startswith('.')]
            for file in files:
                if not file.startswith('.') and os.path.splitext(file)[1].lower() in extensions:
                    path = os.path.join(folder, file)
                    paths[os.path.relpath(path, root).replace(os.sep, '/')] = path
        if len(paths) == before:
            empty.append(name)
    if empty:
        raise ValueError(f"Expected image files ({', '.join(extensions)}) in every class folder of {root!r}. "
                         f"Received: none in {empty[:5]!r}; add images, remove the folders, or pass classes= "
                         "without them")
    return paths
