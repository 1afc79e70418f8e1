"""Token files: ``open_tokens`` maps a ``.bin`` file of token ids (nanoGPT's ``train.bin``: ``uint16`` or
``uint32``, no header) as a read-only ``np.memmap``, and a mapped array is described without reading it whole.

A run compares what it is given (the canonical description of its pipeline, ``flowpipe.execution.canonical``)
and a worker pool checks that its copy of a dataset is current; for an array in memory both read every byte (a
checksum). A token file of billions of tokens would then be read at every run start, so a memory-mapped array
is described instead by

- its dtype and shape, the size of its file in bytes, and a BLAKE2b digest of ``SAMPLES`` evenly spaced chunks
  of ``CHUNK_BYTES`` of its items (the first and the last chunk included): ``mapped_text``, which is the same on
  every machine that holds a copy of the file (no path, no modification time in it);
- ``TokenFile`` adds what tells a rewritten file apart on one machine: its path and modification time, so a
  dataset sent to worker processes is sent again when its file changes, and travels as that record (the file is
  mapped again on the other side) rather than as a copy of the tokens.

A change to a token file that keeps its size and touches none of the sampled chunks is not seen by the
description (it is by ``TokenFile``'s modification time); in-memory arrays keep their full checksum.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ['CHUNK_BYTES', 'SAMPLES', 'TokenFile', 'mapped_text', 'open_tokens', 'sampled_digest']

SAMPLES = 64
CHUNK_BYTES = 4096
_TOKEN_DTYPES = ('uint8', 'uint16', 'int16', 'uint32', 'int32', 'int64', 'uint64')


def open_tokens(path: str | os.PathLike, dtype: Any = 'uint16') -> np.memmap:
    """The token ids of the file ``path`` as a read-only 1-D ``np.memmap`` of ``dtype`` (nanoGPT's
    ``np.memmap(path, dtype=np.uint16, mode='r')``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a dtype that is not an integer one, or a file whose size is not a whole number of tokens.
    """
    dtype = np.dtype(dtype)
    if dtype.name not in _TOKEN_DTYPES:
        raise ValueError(f"Expected a token dtype among {list(_TOKEN_DTYPES)}. Received: dtype={dtype.name!r}; "
                         "nanoGPT's files hold uint16 (uint32 for vocabularies over 65536)")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Expected a token file. Received: {path!r}, which does not exist; write it with "
                                "np.array(ids, dtype=np.uint16).tofile(path)")
    size = os.path.getsize(path)
    if size % dtype.itemsize or not size:
        raise ValueError(f"Expected a file of whole {dtype.name} tokens ({dtype.itemsize} bytes each). Received: "
                         f"{path!r} of {size} bytes; check the dtype it was written with")
    return np.memmap(path, dtype=dtype, mode='r')


def sampled_digest(array: np.ndarray, samples: int = SAMPLES, chunk_bytes: int = CHUNK_BYTES) -> str:
    """A BLAKE2b digest (16 hex digits) of ``array``'s dtype, shape and ``samples`` evenly spaced chunks of
    ``chunk_bytes`` of its items, in order; reads at most ``samples * chunk_bytes`` bytes, whatever its strides."""
    digest = hashlib.blake2b(f'{array.dtype.str} {array.shape}'.encode(), digest_size=8)
    size = int(array.size)
    if size:
        per_chunk = max(1, chunk_bytes // array.dtype.itemsize)
        firsts = np.unique(np.linspace(0, max(size - per_chunk, 0), num=min(samples, size)).astype(np.int64))
        flat = (firsts[:, None] + np.arange(per_chunk)).ravel()
        flat = flat[flat < size]
        values = array[np.unravel_index(flat, array.shape)] if array.ndim != 1 else array[flat]
        digest.update(np.ascontiguousarray(values).data)
    return digest.hexdigest()


def _file_of(array: np.ndarray) -> str | None:
    """The file a memory-mapped array (or a view of one) maps, ``None`` for an array in memory."""
    node = array
    while node is not None:
        name = getattr(node, 'filename', None) if isinstance(node, np.memmap) else None
        if name:
            return name
        node = getattr(node, 'base', None) if isinstance(getattr(node, 'base', None), np.ndarray) else None
    return None


def mapped_text(array: np.ndarray) -> str | None:
    """The canonical text of a memory-mapped array (see the module docstring); ``None`` for an array in memory."""
    name = _file_of(array)
    if name is None:
        return None
    try:
        size = os.path.getsize(name)
    except OSError:
        size = -1
    return (f'memmap(dtype={array.dtype}, shape={array.shape}, file bytes={size}, '
            f'sampled blake2b={sampled_digest(array)})')


@dataclass(frozen=True)
class TokenFile:
    """Where a contiguous memory-mapped token array lies: its file, byte offset, dtype and number of tokens, with
    the file's size, modification time and sampled digest when it was recorded (see the module docstring)."""

    path: str
    offset: int
    dtype: str
    count: int
    size: int
    mtime_ns: int
    digest: str

    @classmethod
    def of(cls, array: np.ndarray) -> TokenFile | None:
        """The record of a 1-D contiguous memory-mapped ``array``; ``None`` for any other array."""
        name = _file_of(array)
        if name is None or array.ndim != 1 or not array.flags.c_contiguous:
            return None
        root = array
        while not (isinstance(root, np.memmap) and not isinstance(root.base, np.ndarray)):
            root = root.base
        # the array's first byte, counted from the file's start: the mapped root begins at its offset
        offset = root.offset + array.__array_interface__['data'][0] - root.__array_interface__['data'][0]
        stat = os.stat(name)
        return cls(os.path.abspath(name), int(offset), array.dtype.str, int(array.size), stat.st_size,
                   stat.st_mtime_ns, sampled_digest(array))

    def open(self) -> np.memmap:
        """The tokens, mapped again (read-only).

        Raises:
            ValueError: the file changed size since it was recorded.
        """
        size = os.path.getsize(self.path) if os.path.exists(self.path) else None
        if size != self.size:
            raise ValueError(f"Expected the token file {self.path!r} of {self.size} bytes it was opened with. "
                             f"Received: {'no file' if size is None else f'{size} bytes'}; it changed during the run")
        return np.memmap(self.path, dtype=np.dtype(self.dtype), mode='r', offset=self.offset, shape=(self.count,))
