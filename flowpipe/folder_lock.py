"""Folder locks: one run at a time writes a kind of file into a folder.

``FolderLock(folder, name, what).acquire()`` holds ``folder/.<name>.lock`` for a run's life. The file is locked
with ``flock``, which the kernel releases when the holding process ends, however it ends (an exception, a
``SIGKILL``): a dead holder never keeps a folder, and no timeout is involved. The file holds its owner's record
(pid, host, start time, what it writes) for the message another run gets. A second holder — another process, or
another run of this process — gets ``FolderInUseError`` naming the folder, the holder and the fix. Released, the
file is removed; a lock file left by a process that ended without releasing it (killed) is taken over, with a
warning naming that process. Under ``torchrun``/``launch`` the rank that writes takes the lock (``lock_on_main``),
and every rank raises when it cannot.
"""
from __future__ import annotations

import datetime
import errno
import json
import os
import socket
import threading
import warnings
import weakref
from typing import Any

from .errors import FolderInUseError

try:
    import fcntl
except ImportError:                     # not a POSIX system: locks within this process only
    fcntl = None

__all__ = ['FolderLock', 'lock_on_main']

# the lock files this process holds (real paths) and their owners' records: two runs of one process are refused
# even where flock locks per process (NFS)
_HELD: dict[str, dict[str, Any]] = {}
_GUARD = threading.Lock()
_BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)


class FolderLock:
    """The lock of one kind of file in ``folder`` (see the module docstring).

    Args:
        folder: the folder (made when missing).
        name: the lock's name: the file is ``folder/.<name>.lock``.
        what: what the holder writes there, for messages (``'run checkpoints'``).
    """

    def __init__(self, folder: str | os.PathLike, name: str, what: str):
        self.folder, self.what = os.fspath(folder), what
        self.path = os.path.join(self.folder, f'.{name}.lock')
        self._finalizer: Any = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._finalizer is not None and self._finalizer.alive

    def acquire(self) -> FolderLock:
        """Take the lock; ``FolderInUseError`` when another run holds it."""
        if os.path.exists(self.folder) and not os.path.isdir(self.folder):
            raise ValueError(f'Expected a folder for the {self.what}. Received: {self.folder!r}, an existing file. '
                             'Pass the path of a folder (a missing one is made), or move the file away.')
        os.makedirs(self.folder, exist_ok=True)
        key = os.path.realpath(self.path)
        record = {'pid': os.getpid(), 'host': socket.gethostname(), 'what': self.what,
                  'since': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')}
        with _GUARD:
            if key in _HELD:
                raise FolderInUseError(self._busy(_HELD[key], this_process=True))
            fd, stale = self._lock()
            _HELD[key] = record
        self._finalizer = weakref.finalize(self, _release, fd, self.path, key, os.getpid())
        data = json.dumps(record).encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        if stale:
            warnings.warn(f"flowpipe: took over the lock {self.path!r} of {_holder(stale)}, which ended without "
                          "releasing it (the process is gone).", UserWarning, stacklevel=2)
        return self

    def release(self) -> None:
        """Remove the lock file and let the next run in (nothing when not held)."""
        if self._finalizer is not None:
            self._finalizer()

    def _lock(self) -> tuple[int, dict[str, Any] | None]:
        """An open descriptor of the locked file at ``path``, and the record a dead holder left there."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, 'O_CLOEXEC', 0), 0o644)
            try:
                if fcntl is None:
                    raise OSError(errno.ENOSYS, 'no fcntl module on this system')
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as error:
                if error.errno not in _BUSY:
                    warnings.warn(f"flowpipe: the file system of {self.folder!r} cannot lock files ({error}): "
                                  f"another process writing {self.what} there at the same time is not detected.",
                                  UserWarning, stacklevel=3)
                    return fd, None
                holder = _read(fd)
                os.close(fd)
                raise FolderInUseError(self._busy(holder, this_process=False)) from None
            try:
                current = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                current = False
            if current:                 # not a file its holder removed between our open and our lock
                return fd, _read(fd)
            os.close(fd)

    def _busy(self, holder: dict[str, Any] | None, this_process: bool) -> str:
        who = (f"another run of this process (pid {os.getpid()}), or another callback of this run, that has not ended "
               "(a gen_batch loop holds it until the loop ends or is closed)" if this_process else _holder(holder))
        return (f"Expected no other run writing {self.what} in {self.folder!r}. Received: its lock {self.path!r} is "
                f"held by {who}. Wait for that run to end (or stop it), or give this run another folder.")


def _holder(record: dict[str, Any] | None) -> str:
    """A lock's owner in words."""
    if not record:
        return 'a process that has not written its name yet'
    return (f"pid {record.get('pid')} on host {record.get('host')!r} since {record.get('since')} "
            f"({record.get('what')})")


def _read(fd: int) -> dict[str, Any] | None:
    """The record in a lock file; ``None`` for an empty or unreadable one."""
    try:
        size = os.fstat(fd).st_size
        record = json.loads(os.pread(fd, size, 0).decode()) if size else None
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _release(fd: int, path: str, key: str, pid: int) -> None:
    if os.getpid() != pid:              # a forked child: the lock is its parent's
        return
    with _GUARD:
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                os.unlink(path)         # before the unlock: a run waiting on this file then retries the path
        except FileNotFoundError:
            pass
        os.close(fd)
        _HELD.pop(key, None)


def lock_on_main(folder: str | os.PathLike, name: str, what: str, world: Any = None,
                 main: bool = True) -> FolderLock | None:
    """The held ``FolderLock`` on the process that writes (``main``; rank 0 of ``world``), ``None`` on the others.

    In a distributed job (``world``) rank 0 takes it and every rank raises when it cannot, so that no rank goes on
    to wait for a rank that stopped.
    """
    if world is None:
        return FolderLock(folder, name, what).acquire() if main else None
    from .parallel import distributed
    held: list[FolderLock] = []
    distributed.from_rank_0(lambda: held.append(FolderLock(folder, name, what).acquire()))
    return held[0] if held else None
