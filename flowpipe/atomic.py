"""Atomic file writes: a file appears under its name complete, or not at all.

The contents go to a temporary file in the target's folder, are flushed to disk (``fsync``), and the temporary
file is renamed over the target (``os.replace``, atomic on POSIX and Windows). A crash at any point leaves the
target as it was; the temporary file is removed when the writer raises. The folder is synced after the rename,
so that the new file survives a power loss: a caller that then removes older files never loses both.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import IO, Any, Callable

__all__ = ['dump_atomically', 'write_bytes_atomically', 'write_text_atomically']


def dump_atomically(value: Any, path: str | os.PathLike, pickle_module: Any = None) -> None:
    """Write ``value`` into ``path`` atomically as flowpipe's files are written (``safe_pickle.dump``: a
    ``torch.save`` zip; ``pickle_module``, ``pickle`` or ``dill``, picks the pickler); the folder is made when
    missing."""
    from .safe_pickle import dump
    _write_atomically(path, lambda file: dump(value, file, pickle_module))


def write_text_atomically(text: str, path: str | os.PathLike) -> None:
    """Write ``text`` (UTF-8) into ``path`` atomically (the folder is made when missing)."""
    write_bytes_atomically(text.encode('utf-8'), path)


def write_bytes_atomically(data: bytes, path: str | os.PathLike) -> None:
    """Write ``data`` into ``path`` atomically (the folder is made when missing)."""
    _write_atomically(path, lambda file: file.write(data))


def _write_atomically(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> None:
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f'.{os.path.basename(path)}.', suffix='.tmp')
    try:
        with os.fdopen(handle, 'wb') as file:
            write(file)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        # A failure to remove the temporary file must not hide the error that stopped the write.
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(folder)


def _sync_folder(folder: str) -> None:
    """Flush the folder's entries to disk, so that the rename survives a power loss (POSIX; a file system that
    cannot sync a folder is left to its own ordering)."""
    if os.name != 'posix':
        return
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
