"""``FilesIndex``: an index whose item ids are file (or folder) names found by glob patterns."""
from __future__ import annotations

import glob
import os
import warnings
from typing import Any, Mapping, Sequence

import numpy as np

from .index import DatasetIndex

__all__ = ['FilesIndex']


class FilesIndex(DatasetIndex):
    """Items are the files matching one or more glob patterns; ids are their base names.

    Args:
        path: a glob pattern (``'data/*.png'``) or a non-empty list of them.
        dirs: match folders instead of files.
        no_ext: drop the extension from ids (``'img_1.png'`` -> ``'img_1'``).
        sort: sort ids; otherwise they keep the order the patterns and the file system give.
        index: instead of ``path``, the ids (a ``DatasetIndex`` or a sequence) of files listed in ``paths``.
        paths: with ``index``, a mapping ``{id: full path}`` holding every id.

    A pattern that matches nothing gives an empty index with a warning (as in batchflow): drawing batches from
    it raises an error that names the problem.

    Raises:
        ValueError: two matches share an id (same name in different folders), ``path`` is an empty list, or an
            id of ``index`` is missing from ``paths``.
        TypeError: ``path`` is neither a pattern nor a list of patterns.
    """

    def __init__(self, path: str | Sequence[str] | None = None, dirs: bool = False, no_ext: bool = False,
                 sort: bool = True, index: Any = None, paths: Mapping[Any, str] | None = None):
        if index is not None or paths is not None:
            ids, found = _from_paths(index, paths)
        else:
            ids, found = _from_patterns(path, dirs, no_ext, sort)
        self._paths = found
        self.dirs = dirs
        if len(ids):
            super().__init__(np.array(ids))
        else:
            self._setup(np.array(ids, dtype=str))

    def _share_from(self, parent: DatasetIndex) -> None:
        self._paths = parent._paths
        self.dirs = parent.dirs

    def get_fullpath(self, item_id: str) -> str:
        """The path of the file with id ``item_id``."""
        try:
            return self._paths[item_id]
        except KeyError:
            raise KeyError(f"Expected an id of this FilesIndex. Received: {item_id!r}") from None


def _from_patterns(path: Any, dirs: bool, no_ext: bool, sort: bool) -> tuple[list, dict]:
    patterns = [path] if isinstance(path, (str, os.PathLike)) else path
    if not isinstance(patterns, (list, tuple)) or not all(
            isinstance(pattern, (str, os.PathLike)) for pattern in patterns):
        raise TypeError(f"Expected path to be a glob pattern or a list of them. Received: path={path!r}")
    if not patterns:
        raise ValueError("Expected at least one glob pattern in path. Received: path=[]; "
                         "pass e.g. path='data/*.png'")
    full_paths = [found for pattern in patterns for found in glob.glob(os.fspath(pattern))
                  if os.path.isdir(found) == dirs]
    if not full_paths:
        kind = 'folders' if dirs else 'files'
        warnings.warn(f"FilesIndex: path={path!r} matches no {kind} (working directory {os.getcwd()!r}): the "
                      "index is empty; check the pattern", UserWarning, stacklevel=3)
    paths = {}
    for full_path in full_paths:
        name = os.path.basename(os.path.normpath(full_path))
        item_id = os.path.splitext(name)[0] if no_ext else name
        if item_id in paths and paths[item_id] != full_path:
            raise ValueError(f"Expected unique file names. Received: {paths[item_id]!r} and {full_path!r} "
                             f"both give the id {item_id!r}; use patterns that do not overlap")
        paths[item_id] = full_path
    return (sorted(paths) if sort else list(paths)), paths


def _from_paths(index: Any, paths: Mapping[Any, str] | None) -> tuple[list, dict]:
    if index is None or not isinstance(paths, Mapping):
        raise TypeError("Expected FilesIndex(index=ids, paths={id: path}) with both arguments. Received: "
                        f"index={index!r:.60}, paths={paths!r:.60}")
    ids = list(index.indices if isinstance(index, DatasetIndex) else index)
    missing = [item_id for item_id in ids if item_id not in paths]
    if missing:
        raise ValueError(f"Expected a path for every id of index. Received no path for {missing[:5]!r}")
    return ids, {item_id: paths[item_id] for item_id in ids}
