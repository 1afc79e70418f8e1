"""Imagenette (320 px): ten easy ImageNet classes as folders of JPEGs, decoded with Pillow."""
from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from ..batch.images_io import pillow, read_image
from .base import Openset
from .fetch import fetch_missing

__all__ = ['Imagenette320', 'list_images']

URL = 'https://s3.amazonaws.com/fast-ai-imageclas/imagenette2-320.tgz'
ARCHIVE = 'imagenette2-320.tgz'
FOLDER = 'imagenette2-320'
SPLITS = {'train': 'train', 'test': 'val'}
WNIDS = {'n01440764': 'tench', 'n02102040': 'English springer', 'n02979186': 'cassette player',
         'n03000684': 'chain saw', 'n03028079': 'church', 'n03394916': 'French horn',
         'n03417042': 'garbage truck', 'n03425413': 'gas pump', 'n03445777': 'golf ball',
         'n03888605': 'parachute'}
_EXTENSIONS = {'.jpeg', '.jpg', '.png'}


class Imagenette320(Openset):
    """Imagenette2-320: 9,469 train and 3,925 test (the publisher's ``val``) colour images, 10 classes.

    The shorter side of each image is 320 px, so shapes differ: ``images`` is an object array of
    ``(H, W, 3)`` uint8 arrays; resize them (``.resize((320, 320))``) before ``to_array()``. All images are
    decoded into memory once (about 5 GB), in parallel threads. ``path`` (default
    ``~/.cache/flowpipe/imagenette320``) may hold the ``imagenette2-320`` folder, be that folder, or hold
    ``imagenette2-320.tgz``, which is then extracted next to it and deleted. With none of them the archive is
    downloaded when the network allows. Labels follow the sorted WordNet ids (``classes`` has their names).
    """
    name = 'imagenette320'
    CLASSES = tuple(WNIDS.values())

    def _load(self) -> dict[str, tuple[Any, np.ndarray]]:
        pillow()
        root = self._root()
        return {split: self._read_split(root / folder) for split, folder in SPLITS.items()}

    def _root(self) -> Path:
        for folder in (self.path / FOLDER, self.path):
            if (folder / 'train').is_dir() and (folder / 'val').is_dir():
                return folder
        archive = self.path / ARCHIVE
        if not archive.is_file():
            fetch_missing(self.path, {ARCHIVE: URL}, 'Imagenette (320 px)', bar=self.bar)
        _extract(archive, self.path)
        return self.path / FOLDER

    def _read_split(self, folder: Path) -> tuple[np.ndarray, np.ndarray]:
        files, labels = list_images(folder)
        images = np.empty(len(files), dtype=object)
        # Pillow releases the GIL while decoding, so threads decode JPEGs in parallel.
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            decoded = pool.map(read_image, files)
            try:
                for i, image in enumerate(tqdm(decoded, total=len(files), desc=f'Imagenette {folder.name}',
                                               disable=not self.bar)):
                    images[i] = image
            except BaseException:
                pool.shutdown(cancel_futures=True)  # a bad file or Ctrl-C: do not decode the rest first
                raise
        return images, labels


def list_images(folder: Path) -> tuple[list[Path], np.ndarray]:
    """List ``folder/<wnid>/*.JPEG`` files in a fixed order with their labels (the wnid's sorted position)."""
    labels_of = {wnid: label for label, wnid in enumerate(sorted(WNIDS))}
    if not folder.is_dir():
        raise FileNotFoundError(f"Expected the Imagenette folder {str(folder)!r}. Received: no such folder. "
                                f"Put the whole {FOLDER} folder (with train/ and val/) there.")
    files, labels = [], []
    for class_folder in sorted(p for p in folder.iterdir() if p.is_dir()):
        if class_folder.name not in labels_of:
            raise ValueError(f"Expected class folders named by the Imagenette WordNet ids {sorted(WNIDS)!r}. "
                             f"Received: {str(class_folder)!r}. Remove that folder.")
        for file in sorted(class_folder.iterdir()):
            if file.suffix.lower() in _EXTENSIONS:
                files.append(file)
                labels.append(labels_of[class_folder.name])
    if not files:
        raise FileNotFoundError(f"Expected JPEG files in {str(folder)!r}/<wnid>/. Received: none. The folder is "
                                f"incomplete: delete it (and {ARCHIVE}) to download it again.")
    return files, np.asarray(labels, dtype=np.int64)


def _extract(archive: Path, into: Path) -> None:
    # Extract into a temporary folder and move the result into place, so an interrupted extraction never
    # leaves a half-filled imagenette2-320 folder that would later load as a smaller data set.
    scratch = Path(tempfile.mkdtemp(prefix='.extract-', dir=into))
    try:
        with tarfile.open(archive, 'r:*') as tar:
            safe = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}
            tar.extractall(scratch, **safe)
        if not (scratch / FOLDER).is_dir():
            raise ValueError(f"Expected a {FOLDER} folder inside {str(archive)!r}. Received: an archive "
                             f"without it. Delete the archive to download it again.")
        os.replace(scratch / FOLDER, into / FOLDER)
    except (OSError, tarfile.TarError, EOFError) as error:
        raise ValueError(f"Expected a tgz archive at {str(archive)!r}. Received: unreadable file ({error}). "
                         f"Delete it to download it again.") from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    archive.unlink()
