"""``FilesIndex``: an index whose item ids are file (or folder) names found by glob patterns."""
from __future__ import annotations

import glob
import os
from typing import Sequence

import numpy as np

from .index import DatasetIndex

__all__ = ['FilesIndex']


class FilesIndex(DatasetIndex):
    """Items are the files matching one or more glob patterns; ids are their base names.

    Args:
        path: a glob pattern (``'data/*.png'``) or a list of them.
        dirs: match folders instead of files.
        no_ext: drop the extension from ids (``'img_1.png'`` -> ``'img_1'``).
        sort: sort ids; otherwise they keep the order the patterns and the file system give.

    Raises:
        ValueError: nothing matches, or two matches share an id (same name in different folders).
    """

    def __init__(self, path: str | Sequence[str], dirs: bool = False, no_ext: bool = False, sort: bool = True):
        patterns = [path] if isinstance(path, (str, os.PathLike)) else path
        if not isinstance(patterns, (list, tuple)) or not patterns or not all(
                isinstance(pattern, (str, os.PathLike)) for pattern in patterns):
            raise TypeError(f"Expected path to be a glob pattern or a list of them. Received: path={path!r}")
        full_paths = [found for pattern in patterns for found in glob.glob(os.fspath(pattern))
                      if os.path.isdir(found) == dirs]
        if not full_paths:
            kind = 'folders' if dirs else 'files'
            raise ValueError(f"Expected {kind} matching path. Received: path={path!r}, which matches no {kind}; "
                             "check the pattern and the working directory")
        paths = {}
        for full_path in full_paths:
            name = os.path.basename(os.path.normpath(full_path))
            item_id = os.path.splitext(name)[0] if no_ext else name
            if item_id in paths and paths[item_id] != full_path:
                raise ValueError(f"Expected unique file names. Received: {paths[item_id]!r} and {full_path!r} "
                                 f"both give the id {item_id!r}; use patterns that do not overlap")
            paths[item_id] = full_path
        ids = sorted(paths) if sort else list(paths)
        self._paths = paths
        super().__init__(np.array(ids))

    def _share_from(self, parent: DatasetIndex) -> None:
        self._paths = parent._paths

    def get_fullpath(self, item_id: str) -> str:
        """The path of the file with id ``item_id``."""
        try:
            return self._paths[item_id]
        except KeyError:
            raise KeyError(f"Expected an id of this FilesIndex. Received: {item_id!r}") from None
