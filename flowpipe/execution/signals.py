"""Graceful stop: a run with a checkpoint stops after the batch in flight on SIGTERM, SIGUSR1 or a first Ctrl-C.

While such a run is active (``Checkpoint(on_interrupt=True)``, the default) its handlers only note the signal. The
batch in flight completes (its stateful actions in the caller's thread; the prefetch workers finish the stateless
part they have started and start nothing new), the checkpoint of that batch is written, and the run raises:
``KeyboardInterrupt`` for Ctrl-C, :class:`~flowpipe.errors.RunStopped` (a ``SystemExit`` with code 128 + the
signal's number: 143 for SIGTERM, 138 for SIGUSR1) for the others. A Ctrl-C while a stop is pending raises
``KeyboardInterrupt`` at once. In a distributed job every rank contributes its flag to an exchange of the batch, so
every rank stops after the same batch: the engine's exchange of item counts at the batch's training step carries it
(``Agreement``), and a batch that trains no model has one ``all_reduce`` of its own (``agree``) after it.

With ``SLURM_JOB_ID`` in the environment, a signal among ``Checkpoint(requeue=...)`` (SIGUSR1 by default) also
runs ``scontrol requeue <job id>`` on rank 0 once the checkpoint is written; the requeued job resumes with
``resume=True``.

Handlers are installed when the run starts and the previous ones put back when it ends (a handler installed over
flowpipe's in the meantime is left in place). A previous handler that is a Python callable (submitit's, an outer
run's) is called too, after the checkpoint. Signal handlers can be set in the main thread only: a run in another
thread warns and runs without them. The worker processes of ``target='processes'`` ignore these signals
(``flowpipe.processes``): one sent to the whole process group or Slurm job step leaves them to finish the batches
the run still needs.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import warnings
from typing import Any, Callable

from ..errors import RunStopped
from ..processes import STOP_SIGNALS

__all__ = ['Agreement', 'GracefulStop', 'REQUEUE_SIGNALS', 'agree', 'requeue', 'slurm_job_id']

#: the signals ``Checkpoint(requeue=...)`` may name
REQUEUE_SIGNALS = ('SIGUSR1', 'SIGTERM')


class GracefulStop:
    """The stop signals of one run: installed by ``install``, put back by ``restore``.

    Attributes:
        received: the stop signals received, in order (their numbers).
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        #: the signal the run stops on, as the ranks agreed after a batch (0 until then)
        self.agreed = 0
        self._previous: dict[int, Any] = {}
        self._ended = False

    @property
    def first(self) -> int:
        """The first stop signal this process received; 0 for none."""
        return self.received[0] if self.received else 0

    def install(self) -> None:
        """Set the handlers (main thread only; elsewhere a warning says the run goes on without them)."""
        if threading.current_thread() is not threading.main_thread():
            warnings.warn("flowpipe: a run with a checkpoint outside the main thread cannot catch SIGTERM, SIGUSR1 "
                          "or Ctrl-C (Python sets signal handlers in the main thread only); it runs without "
                          "stopping gracefully on them. Start the run in the main thread for that.",
                          RuntimeWarning, stacklevel=4)
            return
        for number in STOP_SIGNALS:
            previous = signal.getsignal(number)
            if previous is None or previous == signal.SIG_IGN:
                continue                     # set outside Python, or ignored on purpose: left as it is
            self._previous[number] = previous
            signal.signal(number, self._note)

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced (those still flowpipe's). Outside the main thread (a
        ``gen_batch`` generator closed elsewhere) they are put back by the next signal instead."""
        self._ended = True
        if threading.current_thread() is not threading.main_thread():
            return
        for number, handler in self._previous.items():
            if signal.getsignal(number) == self._note:
                signal.signal(number, handler)

    def _note(self, number: int, frame: Any) -> None:
        if self._ended:                      # the run is over: the signal acts as if flowpipe had never been here
            previous = self._previous[number]
            signal.signal(number, previous)
            if callable(previous):
                previous(number, frame)
            else:
                os.kill(os.getpid(), number)
            return
        if number == signal.SIGINT and self.received:
            raise KeyboardInterrupt          # a Ctrl-C while a stop is pending: at once
        self.received.append(number)

    def stop(self, main: bool, requeue_on: tuple[str, ...]) -> None:
        """After the checkpoint (and ``restore``), when a stop signal came: requeue a Slurm job (rank 0: ``main``),
        call the previous handlers of the signals received, and raise ``KeyboardInterrupt`` or ``RunStopped``."""
        number = self.agreed or self.first
        if not number:
            return
        name = signal.Signals(number).name
        requeued = main and name in requeue_on and requeue()
        for received in dict.fromkeys(self.received):
            handler = self._previous.get(received)
            if callable(handler):
                handler(received, None)       # Python's own SIGINT handler raises KeyboardInterrupt here
        if number == signal.SIGINT:
            raise KeyboardInterrupt
        raise RunStopped(name, requeued)

    def __enter__(self) -> GracefulStop:
        self.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


class Agreement:
    """What the ranks of a distributed run agree on after each batch, carried by the engine's exchange of item counts
    (``DistributedEngine``) at the batch's training steps instead of a collective of its own: rank 0's ``due`` (its
    clock decides a ``seconds`` checkpoint) and the stop signal (the highest any rank received; 0 for none).

    The run's shards hold it (``Shard.agreement``); every rank runs the same exchanges in a batch, so every rank
    ``take``s the same values after it, or ``None`` after a batch without a training step (``agree`` then).

    Args:
        local: this rank's ``(due, stop)`` now, read at each exchange.
    """

    def __init__(self, local: Callable[[], tuple[bool, int]]):
        self.local = local
        self._agreed: tuple[bool, int] | None = None

    def mine(self) -> tuple[int, int]:
        """This rank's ``(due, stop)`` as integers, for the exchange."""
        due, stop = self.local()
        return int(bool(due)), int(stop)

    def record(self, rows: list[tuple[float, float]]) -> None:
        """Every rank's exchanged ``(due, stop)``, in rank order: rank 0's due, the highest stop (kept over the
        exchanges of one batch)."""
        due, stop = bool(rows[0][0]), max(int(stop) for _, stop in rows)
        if self._agreed is not None:
            due, stop = due or self._agreed[0], max(stop, self._agreed[1])
        self._agreed = due, stop

    def take(self) -> tuple[bool, int] | None:
        """The values agreed in the batch's exchanges (then forgotten); ``None`` when it had none."""
        agreed, self._agreed = self._agreed, None
        return agreed

    def __reduce__(self) -> tuple:
        return Agreement, (_nothing,)        # a shard sent to a worker process: its exchanges agree on nothing here


def _nothing() -> tuple[bool, int]:
    return False, 0


def agree(due: bool, stop: int) -> tuple[bool, int]:
    """The exchange of a distributed job's batch without a training step, a single ``all_reduce`` (max) of two
    integers: rank 0's ``due`` (its clock decides a ``seconds`` checkpoint) and the stop signal of the ranks (0:
    none received one; the highest number when several did)."""
    import torch
    import torch.distributed as dist

    from ..parallel import distributed
    nccl = dist.get_backend() == 'nccl'
    device = torch.device('cuda', torch.cuda.current_device()) if nccl else torch.device('cpu')
    flags = torch.tensor([int(bool(due)) if dist.get_rank() == 0 else 0, int(stop)], dtype=torch.int64,
                         device=device)
    with distributed.collective('the ranks\' agreement on a stop signal after a batch'):
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    due, stop = flags.tolist()
    return bool(due), int(stop)


def slurm_job_id(environ: Any = None) -> str | None:
    """The id ``scontrol requeue`` takes for this Slurm job (``<array job>_<task>`` for an array's task);
    ``None`` outside Slurm."""
    environ = os.environ if environ is None else environ
    array, task = environ.get('SLURM_ARRAY_JOB_ID'), environ.get('SLURM_ARRAY_TASK_ID')
    return f'{array}_{task}' if array and task else environ.get('SLURM_JOB_ID') or None


def requeue(run: Callable[..., Any] = subprocess.run) -> bool:
    """Run ``scontrol requeue <job id>`` for this Slurm job; whether it succeeded (a warning says why not)."""
    job = slurm_job_id()
    if job is None:
        return False
    scontrol = shutil.which('scontrol')
    if scontrol is None:
        warnings.warn(f"flowpipe: Slurm job {job} was not requeued: no scontrol on PATH. Requeue it with "
                      f"`scontrol requeue {job}`; it resumes from the checkpoint with resume=True.", RuntimeWarning)
        return False
    done = run([scontrol, 'requeue', job], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        warnings.warn(f"flowpipe: `scontrol requeue {job}` failed with status {done.returncode}: "
                      f"{(done.stderr or '').strip()}. Check that the job was submitted with --requeue.",
                      RuntimeWarning)
        return False
    return True
