"""MNIST from its publisher's idx files (``train-images-idx3-ubyte.gz`` and friends)."""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .base import Openset
from .fetch import fetch_missing

__all__ = ['MNIST', 'read_idx']

MIRROR = 'https://ossci-datasets.s3.amazonaws.com/mnist/'
FILES = {'train': ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'),
         'test': ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte')}
_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: '>i2', 0x0C: '>i4', 0x0D: '>f4', 0x0E: '>f8'}


class MNIST(Openset):
    """70,000 handwritten digits, 28x28 ``uint8`` images of shape ``(28, 28, 1)``; 60,000 train, 10,000 test.

    Reads the four idx files, gzipped or not, from ``path`` (default ``~/.cache/flowpipe/mnist``); files that
    are missing are downloaded (gzipped) when the network allows.
    """
    name = 'mnist'
    CLASSES = tuple(str(digit) for digit in range(10))

    def _load(self) -> dict[str, tuple[Any, np.ndarray]]:
        names = [name for pair in FILES.values() for name in pair]
        if not all(self._find(name) for name in names):
            missing = {f'{name}.gz': MIRROR + f'{name}.gz' for name in names if not self._find(name)}
            fetch_missing(self.path, missing, 'MNIST', bar=self.bar)
        arrays = {name: read_idx(self._find(name)) for name in tqdm(names, desc='MNIST', disable=not self.bar)}
        splits = {}
        for split, (images, labels) in FILES.items():
            splits[split] = (arrays[images][..., None], arrays[labels].astype(np.int64))
            if len(splits[split][0]) != len(splits[split][1]):
                raise ValueError(f"Expected as many labels as images in MNIST {split}. Received: "
                                 f"{len(splits[split][0])} images and {len(splits[split][1])} labels in "
                                 f"{str(self.path)!r}. Download the files again.")
        return splits

    def _find(self, name: str) -> Path | None:
        for candidate in (self.path / name, self.path / f'{name}.gz'):
            if candidate.is_file():
                return candidate
        return None


def read_idx(file: Path) -> np.ndarray:
    """Read an idx file (optionally gzipped) into a numpy array of its declared type and shape."""
    try:
        with (gzip.open(file, 'rb') if file.suffix == '.gz' else open(file, 'rb')) as stream:
            data = stream.read()
    except (OSError, EOFError) as error:
        raise ValueError(f"Expected an idx file at {str(file)!r}. Received: unreadable file ({error}). "
                         f"Delete it to download it again.") from error
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _DTYPES:
        raise ValueError(f"Expected an idx file at {str(file)!r}. Received: a file starting with "
                         f"{data[:4]!r}, not an idx header. Delete it to download it again.")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise ValueError(f"Expected {ndim} dimension sizes after the idx header of {str(file)!r}. Received: "
                         f"{len(data)} bytes in all; the file is truncated. Delete it to download it again.")
    shape = tuple(int(d) for d in np.frombuffer(data, '>u4', count=ndim, offset=4))
    dtype = np.dtype(_DTYPES[data[2]])
    offset = 4 + 4 * ndim
    expected = offset + int(np.prod(shape)) * dtype.itemsize
    if len(data) != expected:
        raise ValueError(f"Expected {expected} bytes in {str(file)!r} for shape {shape!r}. Received: "
                         f"{len(data)} bytes; the file is truncated or corrupt. Delete it to download it again.")
    return np.frombuffer(data, dtype, offset=offset).reshape(shape).astype(dtype.newbyteorder('='))
