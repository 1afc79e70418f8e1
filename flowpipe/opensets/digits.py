"""Digits: 1,797 handwritten digits, 8x8 pixels, shipped inside the package (see ``data/README.md``)."""
from __future__ import annotations

import gzip
import os
from pathlib import Path
from typing import Any

import numpy as np

from .base import Openset

__all__ = ['Digits']

_FILE = 'digits.csv.gz'
_SHIPPED = Path(__file__).parent / 'data' / _FILE
SPLIT_SEED = 0       # the train/test split is fixed: the same items in every run, on every machine
TRAIN_SHARE = 0.8


class Digits(Openset):
    """The UCI optical recognition of handwritten digits data: offline, for demos and tests.

    Images are ``uint8`` arrays of shape ``(8, 8, 1)``: the original 17 grey levels (0-16) scaled to 0-255.
    The 1,797 items are split 80/20 into 1,437 ``train`` and 360 ``test`` items by a permutation drawn from
    ``numpy.random.default_rng(0)``, so the split is the same everywhere. The whole set holds the 1,437 train
    items first, then the 360 test items.

    Args:
        path: a folder with ``digits.csv.gz``; by default the copy shipped inside flowpipe.
        bar: accepted as by every open set; Digits loads in milliseconds, so no bar is shown.
        batch_class: ``ImagesBatch`` (the default) or a subclass of it.
    """
    name = 'digits'
    CLASSES = tuple(str(digit) for digit in range(10))

    def __init__(self, path: str | os.PathLike | None = None, bar: Any = False, batch_class: type | None = None):
        super().__init__(path=_SHIPPED.parent if path is None else path, bar=bar, batch_class=batch_class)

    def _load(self) -> dict[str, tuple[Any, np.ndarray]]:
        images, labels = read_digits(self.path / _FILE)
        order = np.random.default_rng(SPLIT_SEED).permutation(len(labels))
        n_train = int(len(labels) * TRAIN_SHARE)
        train, test = order[:n_train], order[n_train:]
        return {'train': (images[train], labels[train]), 'test': (images[test], labels[test])}


def read_digits(file: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read the csv (64 pixel values 0-16, then the label) into ``(N, 8, 8, 1)`` uint8 images and labels."""
    if not file.exists():
        raise FileNotFoundError(f"Expected the digits data at {str(file)!r}. Received: no such file. Pass path= "
                                f"to a folder with {_FILE}, or path=None for the copy shipped with flowpipe.")
    try:
        with gzip.open(file, 'rt') as text:
            table = np.loadtxt(text, delimiter=',', dtype=np.int64, ndmin=2)
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"Expected {str(file)!r} to be a gzip csv of digits. Received: unreadable file "
                         f"({error}). Delete it or pass path=None for the shipped copy.") from error
    if table.shape[1] != 65 or table.size == 0 or table[:, :64].min() < 0 or table[:, :64].max() > 16:
        raise ValueError(f"Expected rows of 64 pixels in 0..16 and a label in {str(file)!r}. Received: a table "
                         f"of shape {table.shape!r}. The file is corrupt: use path=None for the shipped copy.")
    pixels = np.rint(table[:, :64] * (255 / 16)).astype(np.uint8)
    return pixels.reshape(-1, 8, 8, 1), table[:, 64].astype(np.int64)
