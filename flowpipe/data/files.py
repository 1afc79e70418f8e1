"""``FilesIndex``: an index whose item ids are file (or folder) names found by glob patterns."""
from __future__ import annotations

import glob
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from .index import DatasetIndex

__all__ = ['FilesIndex']


IDS = ('name', 'relative')


class FilesIndex(DatasetIndex):
    """Items are the files matching one or more glob patterns; ids are their base names (or relative paths).

    Args:
        path: a glob pattern (``'data/*.png'``) or a non-empty list of them.
        dirs: match folders instead of files.
        no_ext: drop the extension from ids (``'img_1.png'`` -> ``'img_1'``).
        sort: sort ids; otherwise they keep the order the patterns and the file system give.
        index: instead of ``path``, the ids (a ``DatasetIndex`` or a sequence) of files listed in ``paths``.
        paths: with ``index``, a mapping ``{id: full path}`` holding every id.
        ids: ``'name'`` (batchflow's ids: the base name, ``'001.png'``) or ``'relative'``: the path below the
            folder the patterns share before their first wildcard, with ``/`` separators (``'root/*/*.png'``
            gives ``'cat/001.png'``), for folders that repeat file names, such as one folder per class.

    A pattern that matches nothing gives an empty index with a warning (as in batchflow): drawing batches from
    it raises an error that names the problem. ``get_fullpath(id)`` gives the path of an item's file.

    Raises:
        ValueError: two matches share an id (same name in different folders: use ``ids='relative'``), ``path``
            is an empty list, ``ids`` is unknown, or an id of ``index`` is missing from ``paths``.
        TypeError: ``path`` is neither a pattern nor a list of patterns.
    """

    def __init__(self, path: str | Sequence[str] | None = None, dirs: bool = False, no_ext: bool = False,
                 sort: bool = True, index: Any = None, paths: Mapping[Any, str] | None = None, ids: str = 'name'):
        if ids not in IDS:
            raise ValueError(f"Expected ids to be one of {IDS!r}. Received: ids={ids!r}; 'relative' keeps the "
                             "folders below the pattern's fixed part in the ids")
        if index is not None or paths is not None:
            item_ids, found = _from_paths(index, paths)
        else:
            item_ids, found = _from_patterns(path, dirs, no_ext, sort, relative=ids == 'relative')
        self._paths = found
        self.dirs = dirs
        if len(item_ids):
            super().__init__(np.array(item_ids))
        else:
            self._setup(np.array(item_ids, dtype=str))

    def _share_from(self, parent: DatasetIndex) -> None:
        self._paths = parent._paths
        self.dirs = parent.dirs

    def get_fullpath(self, item_id: str) -> str:
        """The path of the file with id ``item_id``, as the glob pattern gave it (relative to the working
        directory when the pattern is).

        Raises:
            KeyError: ``item_id`` is not an id of the index.
        """
        try:
            return self._paths[item_id]
        except KeyError:
            raise KeyError(f"Expected an id of this FilesIndex. Received: {item_id!r}") from None

    def folder_labels(self, classes: Sequence[str] | None = None) -> tuple[np.ndarray, tuple[str, ...]]:
        """Labels from each file's parent folder, as torchvision's ``ImageFolder`` gives them.

        Args:
            classes: the folder names in label order; by default the sorted names of the parent folders here.
                Pass the ``classes`` of the whole set to label a subset in the same way.

        Returns:
            ``(labels, classes)``: an int64 array with one label per item in index order, and the class names
            (``classes[label]`` is the folder of a label).

        Raises:
            ValueError: a file's folder is not in ``classes``.
        """
        parents = [os.path.basename(os.path.dirname(os.path.normpath(self._paths[item_id])))
                   for item_id in self._indices]
        classes = tuple(sorted(set(parents)) if classes is None else classes)
        label_of = {name: label for label, name in enumerate(classes)}
        unknown = sorted(set(parents) - set(label_of))
        if unknown:
            raise ValueError(f"Expected every parent folder among classes={classes!r}. Received files in "
                             f"{unknown[:5]!r}; add those names to classes or leave classes=None")
        return np.array([label_of[name] for name in parents], dtype=np.int64), classes


def _from_patterns(path: Any, dirs: bool, no_ext: bool, sort: bool, relative: bool) -> tuple[list, dict]:
    patterns = [path] if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(patterns, (list, tuple)) or not all(
            isinstance(pattern, (str, os.PathLike)) for pattern in patterns):
        raise TypeError(f"Expected path to be a glob pattern or a list of them. Received: path={path!r}")
    if not patterns:
        raise ValueError("Expected at least one glob pattern in path. Received: path=[]; "
                         "pass e.g. path='data/*.png'")
    full_paths = [found for pattern in patterns for found in glob.glob(os.fspath(pattern))
                  if os.path.isdir(found) == dirs]
    # Relative ids start below the folder all patterns share before their first wildcard.
    root = os.path.commonpath([os.path.abspath(_fixed_folder(os.fspath(pattern))) for pattern in patterns]) \
        if relative and patterns else None
    if not full_paths:
        kind = 'folders' if dirs else 'files'
        warnings.warn(f"FilesIndex: path={path!r} matches no {kind} (working directory {os.getcwd()!r}): the "
                      "index is empty; check the pattern", UserWarning, stacklevel=3)
    paths = {}
    for full_path in full_paths:
        name = os.path.basename(os.path.normpath(full_path))
        if root is not None:
            name = os.path.relpath(os.path.abspath(full_path), root).replace(os.sep, '/')
        item_id = os.path.splitext(name)[0] if no_ext else name
        if item_id in paths and paths[item_id] != full_path:
            fix = "use patterns that do not overlap" if relative else \
                "pass ids='relative' to keep the folders in the ids, or use patterns that do not overlap"
            raise ValueError(f"Expected unique file names. Received: {paths[item_id]!r} and {full_path!r} "
                             f"both give the id {item_id!r}; {fix}")
        paths[item_id] = full_path
    return (sorted(paths) if sort else list(paths)), paths


def _fixed_folder(pattern: str) -> str:
    """The leading folders of ``pattern`` without wildcards (``'data/train/*/*.png'`` -> ``'data/train'``)."""
    head, parts = pattern, []
    while head and head != os.path.dirname(head):
        head, part = os.path.split(head)
        parts.append(part)
    fixed = head
    for part in reversed(parts):
        if any(char in part for char in '*?['):
            break
        fixed = os.path.join(fixed, part)
    # A pattern without wildcards names one file: its id is its name, below the folder that holds it.
    return os.path.dirname(fixed) if fixed == pattern.rstrip(os.sep) else (fixed or os.curdir)


def _from_paths(index: Any, paths: Mapping[Any, str] | None) -> tuple[list, dict]:
    if index is None or not isinstance(paths, Mapping):
        raise TypeError("Expected FilesIndex(index=ids, paths={id: path}) with both arguments. Received: "
                        f"index={index!r:.60}, paths={paths!r:.60}")
    ids = list(index.indices if isinstance(index, DatasetIndex) else index)
    missing = [item_id for item_id in ids if item_id not in paths]
    if missing:
        raise ValueError(f"Expected a path for every id of index. Received no path for {missing[:5]!r}")
    return ids, {item_id: paths[item_id] for item_id in ids}
