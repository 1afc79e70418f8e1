"""Worker processes that end with their caller: ``watch_caller`` and ``alive``.

A worker that waits for its caller's next message between tasks cannot see the caller die while a task runs (a
hung experiment, a long batch): a killed caller would leave it running. ``watch_caller(pid)`` starts a daemon
thread that checks the caller every ``interval`` seconds and ends the process (``os._exit``) once it is gone,
whatever the main thread is doing. Used by ``launch``'s ranks, the research's worker processes and the data
worker processes of ``target='processes'``.
"""
from __future__ import annotations

import os
import threading
import time

__all__ = ['alive', 'watch_caller']

WATCH_SECONDS = 0.5


def watch_caller(pid: int, interval: float = WATCH_SECONDS, code: int = 1) -> threading.Thread:
    """End this process with exit ``code`` as soon as process ``pid`` is gone (a thread checks it every
    ``interval`` seconds); returns the thread."""
    def watch() -> None:
        while alive(pid):
            time.sleep(interval)
        os._exit(code)
    thread = threading.Thread(target=watch, name='flowpipe-caller-watch', daemon=True)
    thread.start()
    return thread


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f'/proc/{pid}/stat', encoding='ascii') as stat:
            return stat.read().rsplit(')', 1)[1].split()[0] != 'Z'    # a zombie is gone too
    except OSError:
        return True
