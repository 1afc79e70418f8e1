"""Control-flow and domain exceptions.

Control flow: ``SkipBatch`` drops the current batch, ``StopPipeline`` ends the run cleanly.
Domain errors users catch: ``DeviceError`` (no device matches a spec), ``ModelFileError`` (a model file
that is not a flowpipe file or comes from an incompatible version), ``LaunchError`` (a rank of a launched
distributed job failed), ``CheckpointError`` (a checkpoint that cannot be written, read or used for a run),
``FolderInUseError`` (another run holds the lock of a folder this run would write into), ``UnsafeFileError`` (a
file that would run code to be read, not opened as trusted).
Bad values raise ``ValueError``, bad types ``TypeError``, unknown names ``KeyError``/``AttributeError`` subclasses
below, so that plain ``except KeyError`` still works. ``add_note`` attaches a note to an exception on every
supported Python (3.10 has no ``BaseException.add_note``).
"""

__all__ = ['CheckpointError', 'DeviceError', 'ExpressionError', 'FolderInUseError', 'LaunchError', 'ModelFileError',
           'RunStopped', 'SkipBatch', 'StopPipeline', 'UnknownActionError', 'UnsafeFileError', 'add_note']


def add_note(exc: BaseException, note: str) -> None:
    """Attach ``note`` to ``exc``: shown under the traceback on Python 3.11+, kept in ``__notes__`` on 3.10."""
    if hasattr(exc, 'add_note'):
        exc.add_note(note)
    else:
        exc.__notes__ = [*getattr(exc, '__notes__', []), note]


class SkipBatch(Exception):
    """Raised inside an action to drop the current batch; the run goes on with the next one."""


class StopPipeline(Exception):
    """Raised inside an action to end the run after the batches already delivered."""


class DeviceError(ValueError):
    """No available device matches a device spec."""


class LaunchError(RuntimeError):
    """A rank of a launched distributed job failed: it raised, exited with an error code or was killed.

    Attributes:
        rank: the rank that failed first.
        kind: the exception's type name (``'Signal'`` for a killed rank, ``'Exit'`` for an exit code).
        message: the exception's message.
        remote_traceback: the rank's traceback (empty for a signal or an exit code).
    """

    def __init__(self, rank: int, kind: str, message: str, remote_traceback: str = ''):
        self.rank, self.kind, self.message, self.remote_traceback = rank, kind, message, remote_traceback
        trace = f'\n\nTraceback in rank {rank}:\n{remote_traceback}' if remote_traceback else ''
        super().__init__(f'rank {rank} failed: {kind}: {message}{trace}')

    def __reduce__(self):
        return type(self), (self.rank, self.kind, self.message, self.remote_traceback)


class ModelFileError(ValueError):
    """A model file is corrupt, foreign, or from an incompatible version."""


class UnsafeFileError(ValueError):
    """A pickled file (a model file, a checkpoint) names code that reading it would run (a class or function
    other than those that rebuild data and models), and it was not opened with ``trusted=True``."""


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written, read or used for this run; the message says why and what to do."""


class FolderInUseError(RuntimeError):
    """Another run (another process, or another run of this one) holds the lock of a folder this run writes into;
    the message names the folder, the holder and what to do."""


class ExpressionError(KeyError):
    """A named expression refers to a name that does not exist (a component, variable, config key...)."""

    def __str__(self):
        return str(self.args[0]) if self.args else ''


class UnknownActionError(AttributeError):
    """A pipeline refers to an action that neither the batch class nor the built-ins define."""


class RunStopped(SystemExit):
    """A run with a checkpoint stopped on SIGTERM or SIGUSR1 after writing the checkpoint of its last completed
    batch (``flowpipe/execution/signals.py``).

    A ``SystemExit``: uncaught, the process exits with ``code``, 128 + the signal's number (143 for SIGTERM, 138
    for SIGUSR1: what a shell reports for a process the signal ended), so schedulers and launchers see a process
    ended by the signal, not a finished one; ``except Exception`` does not catch it.

    Attributes:
        signal: the signal's name (``'SIGTERM'``, ``'SIGUSR1'``).
        requeued: whether ``scontrol requeue`` requeued the Slurm job.
    """

    def __init__(self, signal: str, requeued: bool = False):
        import signal as signals
        self.signal, self.requeued = signal, requeued
        super().__init__(128 + int(getattr(signals, signal)))

    def __str__(self) -> str:
        again = 'the Slurm job is requeued; ' if self.requeued else ''
        return (f"flowpipe: the run stopped on {self.signal} after writing its checkpoint; {again}resume it with "
                f"resume=True (exit status {self.code})")

    def __reduce__(self):
        return type(self), (self.signal, self.requeued)
