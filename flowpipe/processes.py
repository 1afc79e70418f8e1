"""flowpipe's child processes, started, watched and stopped one way: ``Launcher.start(spec) -> Child``, ``stop``.

Three parts of flowpipe start processes: the data workers of ``target='processes'`` (``execution/workers.py``),
Research's pool (``research/pool.py``) and ``launch``'s ranks (``parallel/launcher.py``). What differs is the
kind of process, one launcher each: :class:`Spawned` (the workers: ``'spawn'``, without re-running the user's
script) and :class:`Forked` (the ranks: forks of a forkserver that imported torch once). What is the same lives
here, once:

- in the child, before its target runs: the signals its caller decides on are ignored, and a thread ends it as
  soon as the caller is gone (``flowpipe.lifeline``); a rank also has Linux kill it when its forkserver dies;
- :func:`stop`: ask each child to end (``Spec.ask``: a sentinel on its task queue; without one, SIGTERM), wait
  ``grace`` seconds, SIGTERM those left (unless they ignore it), wait ``grace``, SIGKILL; reap every child, then
  close the channels each one held (a queue's semaphores are files in /dev/shm until it is closed and collected).

Workers ignore the signals a run with a checkpoint stops on (:data:`STOP_SIGNALS`, ``execution/signals.py``):
Ctrl-C reaches the whole process group, and Slurm sends SIGTERM or SIGUSR1 to every process of a job step. The
caller's run then finishes its batch with its workers still there, writes its checkpoint and stops them with
:func:`stop`. A rank runs a pipeline of its own, so it keeps its signals; it starts in a process group of its own,
so that a Ctrl-C in the caller's terminal reaches the caller only, and the caller passes the signals it gets on to
its ranks (:class:`Forwarding`): each rank gets each signal once, as torchrun's workers do.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .lifeline import watch_caller

__all__ = ['Child', 'Forked', 'Forwarding', 'Launcher', 'STOP_SIGNALS', 'Spawned', 'Spec', 'hidden_main', 'release',
           'stop']

#: the signals a run with a checkpoint stops on (those the platform has); worker processes ignore them
STOP_SIGNALS = tuple(getattr(signal, name) for name in ('SIGTERM', 'SIGUSR1', 'SIGINT') if hasattr(signal, name))
_START_LOCK = threading.Lock()


@dataclass(frozen=True)
class Spec:
    """What to start: ``target(*args)`` in a process called ``name``.

    Attributes:
        ask: called in the caller to ask the process to end (puts its sentinel on its task queue); ``None``:
            SIGTERM asks.
        channels: the queues and pipe ends the process uses, closed once it has ended.
    """
    target: Callable[..., Any]
    args: tuple = ()
    name: str = 'flowpipe-process'
    ask: Callable[[], Any] | None = None
    channels: tuple = ()


class Child:
    """One started process: ``pid``, ``name``, ``alive``, ``exitcode``, ``join``, ``stop``."""

    def __init__(self, process: Any, spec: Spec, ignored: tuple[int, ...]):
        self.process = process
        self.ask = spec.ask
        self.channels = list(spec.channels)
        self.ignored = ignored

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def name(self) -> str:
        return self.process.name

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    @property
    def exitcode(self) -> int | None:
        """``None`` while it runs; its exit code, or minus the signal that ended it."""
        return self.process.exitcode

    def join(self, timeout: float | None = None) -> None:
        self.process.join(timeout)

    def stop(self, grace: float, now: bool = False) -> None:
        """:func:`stop` for this process alone."""
        stop([self], grace, now)

    def signal(self, number: int) -> None:
        """Send signal ``number`` unless the process is known to have ended. Safe in a signal handler: it reads the
        exit code already collected and never waits for one (``exitcode`` reads it from a pipe, and a handler that
        ran inside that read would take the code from the read it interrupted)."""
        popen = getattr(self.process, '_popen', None)
        if self.pid is None or getattr(popen, 'returncode', None) is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, number)

    def _steps(self, now: bool) -> list[int | None]:
        """The stop sequence's requests, in order: ``None`` (``ask``), SIGTERM, SIGKILL."""
        steps: list[int | None] = [] if now else [None if self.ask else signal.SIGTERM]
        if signal.SIGTERM not in self.ignored and signal.SIGTERM not in steps:
            steps.append(signal.SIGTERM)
        return [*steps, signal.SIGKILL]

    def _request(self, step: int | None) -> None:
        """Send one request of the stop sequence (a process never started or already ended gets none)."""
        if self.pid is None or self.exitcode is not None:
            return
        if step is None:
            with contextlib.suppress(OSError, ValueError):      # a queue already closed: the next step follows
                self.ask()
        else:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, step)


def stop(children: Iterable[Child], grace: float, now: bool = False) -> None:
    """The one stop sequence: ask, wait ``grace`` seconds, SIGTERM (unless ignored), wait ``grace``, SIGKILL; every
    child reaped and its channels released. ``now`` skips the asking (Ctrl-C in the caller, a job past its time).

    The children wait together: ``grace`` bounds each step of the sequence, not each child.
    """
    children = list(children)
    plans = {id(child): child._steps(now) for child in children}
    for number in range(max((len(plan) for plan in plans.values()), default=0)):
        running = [child for child in children if child.pid is not None and child.exitcode is None]
        if not running:
            break
        for child in running:
            plan = plans[id(child)]
            child._request(plan[min(number, len(plan) - 1)])
        last = all(number >= len(plans[id(child)]) - 1 for child in running)
        _wait_ended(running, None if last else grace)
    for child in children:
        if child.pid is not None:
            child.join()
        release(child.channels)
        child.channels, child.ask = [], None      # a kept child (an error's traceback) holds no queue


def _wait_ended(children: list[Child], seconds: float | None) -> None:
    deadline = None if seconds is None else time.monotonic() + seconds
    for child in children:
        child.join(None if deadline is None else max(0.0, deadline - time.monotonic()))


def release(channels: Iterable[Any]) -> None:
    """Close queues (after their feeder thread has flushed or been cancelled) and pipe ends; idempotent."""
    for channel in channels:
        if channel is None:
            continue
        with contextlib.suppress(OSError, ValueError):
            channel.close()
        if hasattr(channel, 'join_thread'):
            channel.join_thread()


class Forwarding:
    """The caller's stop signals passed on to its children while it waits for them: ``with Forwarding(children)``.

    Each of ``signals`` the caller receives in the block is noted in ``received`` and sent to every child in
    ``children`` that runs (the list is read at each signal: a child started in the block gets the signals that
    come after its start). A second SIGINT is passed on and raises ``KeyboardInterrupt`` at once (a Ctrl-C while a
    stop is pending, as in a run). Handlers are set in the main thread only (Python's rule): elsewhere the block
    runs without them and the signals act on the caller as they would without flowpipe. A signal the caller
    ignores, or whose handler was set outside Python, is left alone. The previous handlers are put back when the
    block ends (one installed over ours meanwhile stays); ``call_previous`` then calls those of the signals
    received that are Python functions (not Python's own SIGINT handler: the caller raises ``KeyboardInterrupt``
    itself where it should).

    Attributes:
        received: the signals received in the block, in order (their numbers).
    """

    def __init__(self, children: list[Child], signals: tuple[int, ...] = STOP_SIGNALS):
        self.children, self.signals = children, tuple(signals)
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Forwarding:
        if threading.current_thread() is threading.main_thread():
            for number in self.signals:
                previous = signal.getsignal(number)
                if previous is not None and previous != signal.SIG_IGN:
                    self._previous[number] = previous
                    signal.signal(number, self._pass_on)
        return self

    def __exit__(self, *exc: Any) -> None:
        for number, handler in self._previous.items():
            if signal.getsignal(number) == self._pass_on:
                signal.signal(number, handler)

    def call_previous(self) -> None:
        """Call the previous Python handlers of the signals received (each once, in the order first received)."""
        for number in dict.fromkeys(self.received):
            handler = self._previous.get(number)
            if callable(handler) and handler is not signal.default_int_handler:
                handler(number, None)

    def _pass_on(self, number: int, frame: Any) -> None:
        again = number == signal.SIGINT and number in self.received
        self.received.append(number)
        for child in list(self.children):
            child.signal(number)
        if again:
            raise KeyboardInterrupt


class Launcher:
    """How one kind of process starts: ``context()`` (its ``multiprocessing`` context, for the channels to give
    it) and ``start(spec) -> Child``.

    Attributes:
        method: the ``multiprocessing`` start method.
        ignore: the signals the processes ignore.
        deathsig: whether Linux kills a process when its parent dies.
        daemon: whether the processes are daemonic (they can start no processes of their own).
        group: whether each process starts a process group of its own (signals sent to the caller's group, such
            as a Ctrl-C in its terminal, do not reach it).
        default: the signals set back to their default action in the process (its parent ignored them).
    """
    method = 'spawn'
    ignore: tuple[int, ...] = ()
    deathsig = False
    daemon = False
    group = False
    default: tuple[int, ...] = ()

    def context(self) -> Any:
        import multiprocessing
        return multiprocessing.get_context(self.method)

    def start(self, spec: Spec) -> Child:
        """Start ``spec.target(*spec.args)`` in a new process that ends with its caller."""
        process = self.context().Process(target=_enter, name=spec.name, daemon=self.daemon,
                                         args=(os.getpid(), self, spec.target, spec.args))
        with self.starting():
            process.start()
        return Child(process, spec, self.ignore)

    def starting(self) -> contextlib.AbstractContextManager:
        """Held while a process starts."""
        return contextlib.nullcontext()


class Spawned(Launcher):
    """Worker processes (data workers, Research's pool): spawned while ``__main__`` looks like an interactive
    session's, so that they never re-run the user's script (no ``if __name__ == '__main__'`` needed); daemonic;
    they ignore :data:`STOP_SIGNALS` (the caller stops them). ``'fork'`` is never used: forking a process that runs
    torch threads can deadlock the child."""
    method = 'spawn'
    ignore = STOP_SIGNALS
    daemon = True

    def starting(self) -> contextlib.AbstractContextManager:
        return hidden_main()


class Forked(Launcher):
    """Ranks of a distributed job: forks of a forkserver that imported ``preload`` once (no thread or CUDA state of
    the caller is copied; later starts take a fraction of a second). They may start processes of their own, keep
    their signals (each in a process group of its own: the caller passes signals on, :class:`Forwarding`), and are
    killed by Linux when the forkserver dies.

    The forkserver imports :mod:`flowpipe.forkserver` first, which has it ignore SIGTERM and SIGUSR1: a signal
    sent to the caller's whole process group leaves it (and so its ranks) running, and the ranks stop gracefully
    on the signal the caller passes on. The ranks set the two back to their default action.

    Args:
        preload: the modules the forkserver imports.
    """
    method = 'forkserver'
    deathsig = True
    group = True
    default = tuple(getattr(signal, name) for name in ('SIGTERM', 'SIGUSR1') if hasattr(signal, name))

    def __init__(self, preload: tuple[str, ...] = ()):
        self.preload = ('flowpipe.forkserver', *preload)

    def context(self) -> Any:
        context = super().context()
        context.set_forkserver_preload(list(self.preload))
        return context


@contextlib.contextmanager
def hidden_main(lock: bool = True) -> Iterator[None]:
    """While processes start, ``__main__`` has no file and no spec: spawn then does not import it in them.

    ``lock`` holds a lock meanwhile, so that two pools starting at once restore ``__main__`` in order; a caller
    that hides it for a long time (a Dask cluster's whole life, whose nannies restart workers) passes ``False``.
    """
    main = sys.modules['__main__']
    saved = {name: main.__dict__[name] for name in ('__file__', '__spec__') if name in main.__dict__}
    with _START_LOCK if lock else contextlib.nullcontext():
        main.__dict__.pop('__file__', None)
        main.__spec__ = None
        try:
            yield
        finally:
            for name, value in saved.items():
                setattr(main, name, value)


# ----- in the child -----

def _enter(caller: int, launcher: Launcher, target: Callable[..., Any], args: tuple) -> Any:
    """A child's first steps as its ``launcher`` says, then its target: a process group of its own, the signals
    set back to their default action and those ignored, Linux's parent-death signal asked for (the parent of a rank
    is the forkserver, which outlives a killed caller as long as any rank holds its pipe), a thread that ends the
    process once the caller is gone (even in the middle of a task)."""
    if launcher.group:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
    for number in launcher.default:
        signal.signal(number, signal.SIG_DFL)
    for number in launcher.ignore:
        signal.signal(number, signal.SIG_IGN)
    if launcher.deathsig and sys.platform.startswith('linux'):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGKILL)    # PR_SET_PDEATHSIG
    watch_caller(caller)
    return target(*args)
