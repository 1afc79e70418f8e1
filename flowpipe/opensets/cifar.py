"""CIFAR-10 from its publisher's python pickle batches (a ``cifar-10-batches-py`` folder or the .tar.gz)."""
from __future__ import annotations

import io
import pickle
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .base import Openset
from .fetch import fetch_missing

__all__ = ['CIFAR10', 'read_pickle_batch']

URL = 'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz'
ARCHIVE = 'cifar-10-python.tar.gz'
FOLDER = 'cifar-10-batches-py'
FILES = {'train': tuple(f'data_batch_{i}' for i in range(1, 6)), 'test': ('test_batch',)}


class CIFAR10(Openset):
    """60,000 colour images, 32x32, ``uint8`` of shape ``(32, 32, 3)``, 10 classes; 50,000 train, 10,000 test.

    ``path`` (default ``~/.cache/flowpipe/cifar10``) may hold the extracted ``cifar-10-batches-py`` folder,
    be that folder itself, or hold ``cifar-10-python.tar.gz`` (read without extracting). With none of them
    the archive is downloaded when the network allows.
    """
    name = 'cifar10'
    CLASSES = ('airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog', 'horse', 'ship', 'truck')

    def _load(self) -> dict[str, tuple[Any, np.ndarray]]:
        names = [name for group in FILES.values() for name in group]
        with self._opener() as open_member:
            batches = {name: read_pickle_batch(open_member(name), name)
                       for name in tqdm(names, desc='CIFAR10', disable=not self.bar)}
        splits = {}
        for split, group in FILES.items():
            images = np.concatenate([batches[name][0] for name in group])
            splits[split] = (images, np.concatenate([batches[name][1] for name in group]))
        return splits

    def _opener(self) -> '_Members':
        for folder in (self.path / FOLDER, self.path):
            if (folder / FILES['test'][0]).is_file():
                return _Members(folder=folder)
        if not (self.path / ARCHIVE).is_file():
            fetch_missing(self.path, {ARCHIVE: URL}, 'CIFAR-10', bar=self.bar)
        return _Members(archive=self.path / ARCHIVE)


class _Members:
    """Opens batch files from a folder or from inside the tar.gz, as a context manager."""

    def __init__(self, folder: Path | None = None, archive: Path | None = None):
        self.folder, self.archive, self.tar = folder, archive, None

    def __enter__(self) -> Callable[[str], tuple[io.BufferedIOBase, str]]:
        if self.archive is not None:
            try:
                self.tar = tarfile.open(self.archive, 'r:gz')
            except (OSError, tarfile.TarError, EOFError) as error:
                raise ValueError(f"Expected a tar.gz archive at {str(self.archive)!r}. Received: unreadable file "
                                 f"({error}). Delete it to download it again.") from error
        return self.open

    def __exit__(self, *exc_info: Any) -> None:
        if self.tar is not None:
            self.tar.close()

    def open(self, name: str) -> tuple[io.BufferedIOBase, str]:
        if self.tar is None:
            file = self.folder / name
            if not file.is_file():
                raise FileNotFoundError(f"Expected the CIFAR-10 batch {str(file)!r}. Received: no such file. "
                                        f"Put the whole {FOLDER} folder (or {ARCHIVE}) there.")
            return open(file, 'rb'), str(file)
        where = f'{self.archive}:{FOLDER}/{name}'
        try:
            member = self.tar.extractfile(f'{FOLDER}/{name}')
        except (KeyError, tarfile.TarError, OSError, EOFError) as error:
            raise ValueError(f"Expected {where!r} in the archive. Received: {error}. The archive is incomplete "
                             f"or corrupt: delete it to download it again.") from error
        return member, where


class _ArraysOnly(pickle.Unpickler):
    # The batches are pickles: allow only what numpy arrays need, so a tampered file cannot run code.
    _ALLOWED = {('numpy.core.multiarray', '_reconstruct'), ('numpy._core.multiarray', '_reconstruct'),
                ('numpy', 'ndarray'), ('numpy', 'dtype'), ('numpy.core.multiarray', 'scalar'),
                ('numpy._core.multiarray', 'scalar'), ('copy_reg', '_reconstructor'),
                ('copyreg', '_reconstructor'), ('builtins', 'object'), ('_codecs', 'encode')}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR batch")
        return super().find_class(module, name)


def read_pickle_batch(opened: tuple[io.BufferedIOBase, str], name: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR pickle batch into ``(N, 32, 32, 3)`` uint8 images and int64 labels."""
    stream, where = opened
    try:
        with stream:
            content = _ArraysOnly(stream, encoding='bytes').load()
        data = np.asarray(content[b'data'], dtype=np.uint8)
        labels = np.asarray(content[b'labels'], dtype=np.int64)
        images = data.reshape(len(data), 3, 32, 32).transpose(0, 2, 3, 1)
    except (pickle.UnpicklingError, KeyError, TypeError, ValueError, EOFError, OSError) as error:
        raise ValueError(f"Expected a CIFAR-10 pickle batch {name!r} with b'data' (N x 3072 uint8) and "
                         f"b'labels' at {where!r}. Received: {type(error).__name__}: {error}. The file is "
                         f"corrupt: delete it to download it again.") from error
    if len(images) != len(labels):
        raise ValueError(f"Expected as many labels as images in {where!r}. Received: {len(images)} images, "
                         f"{len(labels)} labels. The file is corrupt: delete it to download it again.")
    return np.ascontiguousarray(images), labels
