"""Imported first by the forkserver that forks ``launch``'s ranks (:class:`flowpipe.processes.Forked`), and by no
other process: importing it has the process ignore SIGTERM and SIGUSR1 (the forkserver ignores SIGINT already).

The forkserver is in the caller's process group and Linux kills every rank when it dies, so a SIGTERM sent to the
whole group (``kill -TERM -- -PGID``, a scheduler signalling every process of a job) would kill the ranks at once,
before the caller could pass the signal on to them. Ignoring it, the forkserver stays, and the ranks stop
gracefully on the signal the caller passes on; it still exits once the caller is gone. A rank sets both signals
back to their default action first thing (``Forked.default``).
"""
import signal

from .processes import Forked

__all__: list = []

for _number in Forked.default:
    signal.signal(_number, signal.SIG_IGN)
