"""``launch``: run a function or a script in N local processes that form one distributed job (for notebooks and
tests; use ``torchrun`` for real jobs).

Each process is a ``flowpipe.processes.Forked`` process, a fork of ``multiprocessing``'s forkserver that imported
torch and flowpipe once (no thread or CUDA state of the caller is copied; later launches start in a fraction of a
second), and gets torchrun's environment: ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``, ``GLOO_SOCKET_IFNAME=lo`` and
``FLOWPIPE_DIST_TIMEOUT``, so flowpipe's runs see a distributed job (gloo on the CPU), and the caller's default
dtype (``torch.set_default_dtype``), as the function called in the caller would. The function travels with
dill, so one defined in a notebook works. The caller waits for every rank: the first error of any rank (an
exception, an exit code, a signal) ends the others and raises :class:`LaunchError` naming the rank, the
exception type and message, with the rank's traceback; past ``timeout`` every rank is ended and ``TimeoutError``
raised. Ranks also end when the caller dies (each rank watches it, and the forkserver exits once its ranks are
gone), so none is left behind. The ranks still running when the job ends are stopped by
``flowpipe.processes.stop``: SIGTERM, then SIGKILL for a rank that lingers.

Signals, as torchrun passes them on: each rank runs in a process group of its own, and while the caller waits,
the SIGTERM, SIGUSR1 and SIGINT it receives are passed on to every rank that runs (``flowpipe.processes.Forwarding``,
in the main thread only), so a Ctrl-C in the caller's terminal reaches each rank once. A rank's run with a
checkpoint then stops gracefully, and a graceful stop (``RunStopped``, or ``KeyboardInterrupt`` after the caller's
Ctrl-C) is never cut short: the caller waits for every rank to report, until ``timeout``, and raises what the run
raised in the ranks (``RunStopped`` with the ranks' signal; ``KeyboardInterrupt``), the first rank's report as
its cause. A second Ctrl-C is passed on and raises ``KeyboardInterrupt`` at once. The caller's previous handlers
are put back once the ranks have ended, whatever they did, and those that are Python functions are then called
for the signals received.
"""
from __future__ import annotations

import os
import queue
import runpy
import signal
import socket
import sys
import time
import traceback
from typing import Any, Callable, Sequence

import dill

from ..errors import LaunchError, RunStopped
from ..processes import Forked, Forwarding, Spec, release, stop

__all__ = ['LaunchError', 'launch']

_POLL = 0.05
_GRACE = 1.0      # seconds to look for a dead rank behind another rank's error
_STOP = 3.0       # seconds a rank asked to stop (SIGTERM) has before SIGKILL


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _check(target: Any, nprocs: Any, timeout: Any) -> None:
    if not (callable(target) or isinstance(target, (str, os.PathLike))):
        raise TypeError(f'Expected a function or the path of a script to launch. Received: {target!r} of type '
                        f'{type(target).__name__}.')
    if isinstance(target, (str, os.PathLike)) and not os.path.isfile(target):
        raise ValueError(f'Expected the path of an existing script. Received: {os.fspath(target)!r}.')
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise ValueError(f'Expected nprocs as a positive int (processes to start). Received: nprocs={nprocs!r}.')
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f'Expected timeout as positive seconds. Received: timeout={timeout!r}.')


def launch(target: Callable | str | os.PathLike, nprocs: int = 2, args: Sequence = (), kwargs: dict | None = None,
           *, timeout: float = 300.0, env: dict | None = None) -> list:
    """Run ``target(*args, **kwargs)`` (or the script ``target`` with ``args`` as its ``sys.argv[1:]``) in
    ``nprocs`` local processes of one distributed job.

    Args:
        target: a function (its return value must be picklable with dill), or the path of a Python script.
        nprocs: the number of processes (the world size).
        args, kwargs: the function's arguments (a script's command-line arguments).
        timeout: seconds for the whole job, also each collective's timeout in the ranks.
        env: more environment variables for the ranks.

    Returns:
        The return values in rank order (``None`` for a script).

    Raises:
        LaunchError: a rank raised, exited with a non-zero code or was killed by a signal.
        RunStopped: the ranks' run with a checkpoint stopped on SIGTERM or SIGUSR1 (sent to the caller, which
            passed it on, or to the ranks) after writing its checkpoint.
        KeyboardInterrupt: a Ctrl-C in the caller, passed on to the ranks, stopped them (after their run's
            checkpoint, where they run one); a second Ctrl-C raises it at once.
        TimeoutError: the job did not finish within ``timeout``.
    """
    _check(target, nprocs, timeout)
    import torch
    default_dtype = str(torch.get_default_dtype()).removeprefix('torch.')
    launcher = Forked(preload=('flowpipe.parallel.launcher',))
    results = launcher.context().Queue()
    payload = dill.dumps((os.fspath(target) if isinstance(target, os.PathLike) else target, tuple(args),
                          dict(kwargs or {})), recurse=True)
    base_env = {'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(_free_port()), 'WORLD_SIZE': str(nprocs),
                'LOCAL_WORLD_SIZE': str(nprocs), 'GLOO_SOCKET_IFNAME': 'lo',
                'FLOWPIPE_DIST_TIMEOUT': str(timeout), **{str(k): str(v) for k, v in (env or {}).items()}}
    processes: list = []
    forwarding = Forwarding(processes)
    try:
        with forwarding:
            for rank in range(nprocs):
                rank_env = {**base_env, 'RANK': str(rank), 'LOCAL_RANK': str(rank), 'GROUP_RANK': '0'}
                processes.append(launcher.start(Spec(_worker, (payload, rank_env, default_dtype, results),
                                                     f'flowpipe-rank-{rank}')))
            values, stops = _wait(processes, results, time.monotonic() + timeout, timeout, forwarding.received)
    finally:
        stop(processes, _STOP)
        release([results])
        forwarding.call_previous()
    if stops:
        _raise_stopped(stops)
    return values


def _wait(processes: list, results: Any, deadline: float, timeout: float, received: list) -> tuple[list, list]:
    """The ranks' return values and their graceful stops (:func:`_graceful`), once every rank has reported; any
    other failure raises (the caller ends the other ranks). A rank that stops gracefully is waited for until the
    job's deadline, however long its checkpoint takes to write."""
    values: dict[int, Any] = {}
    stops: list[tuple] = []
    silent_since = None
    while len(values) + len(stops) < len(processes):
        try:
            rank, ok, data = results.get(timeout=_POLL)
        except queue.Empty:
            silent_since = _idle(processes, {*values, *(error[0] for error in stops)}, silent_since, deadline,
                                 timeout)
            continue
        if ok:
            values[rank] = dill.loads(data)
        elif all(_graceful(error[1], received) for error in [*stops, (rank, *data)]):
            stops.append((rank, *data))
        else:
            _raise_first(processes, values, results, [*stops, (rank, *data)])
    for process in processes:
        process.join(timeout=max(1.0, deadline - time.monotonic()))
    return [values.get(rank) for rank in range(len(processes))], stops


def _idle(processes: list, reported: set, silent_since: float | None, deadline: float, timeout: float) -> float | None:
    """Between messages: a rank dead without a word, every rank gone with results missing, or the deadline passed
    raises; returns when the ranks were all seen gone (``None`` while some run)."""
    _check_exits(processes, reported)
    if all(process.exitcode is not None for process in processes):
        silent_since = silent_since or time.monotonic()
        if time.monotonic() - silent_since > _GRACE:        # exited with 0 and never reported
            missing = [rank for rank in range(len(processes)) if rank not in reported]
            raise LaunchError(missing[0], 'Exit', f'ranks {missing} exited without a result', '')
    if time.monotonic() > deadline:
        running = [rank for rank in range(len(processes)) if rank not in reported]
        raise TimeoutError(f'Expected the launched job to finish within timeout={timeout} s. Received: '
                           f'ranks {running} still running; they were ended. Raise timeout, or look for '
                           f'a rank that waits in a collective the others never reach.') from None
    return silent_since


def _graceful(kind: str, received: list) -> bool:
    """Whether a rank's error is a graceful stop, after which the other ranks are waited for (they stop after the
    same batch and write its checkpoint together): ``RunStopped``, or ``KeyboardInterrupt`` once the caller got a
    Ctrl-C and passed it on."""
    return kind == 'RunStopped' or (kind == 'KeyboardInterrupt' and signal.SIGINT in received)


def _raise_stopped(stops: list) -> None:
    """The ranks stopped gracefully: ``RunStopped`` as the run raised it in the ranks (Ctrl-C:
    ``KeyboardInterrupt``), caused by the first rank's report."""
    rank, kind, message, trace, _, stopped = min(stops, key=lambda error: error[4])
    cause = LaunchError(rank, kind, message, trace)
    if all(error[5] for error in stops):
        raise RunStopped(stopped[0], any(error[5][1] for error in stops)) from cause
    raise KeyboardInterrupt('flowpipe: the launched ranks stopped on Ctrl-C, passed on to them (a run with a '
                            'checkpoint writes it first; resume it with resume=True)') from cause


def _raise_first(processes: list, values: dict, results: Any, errors: list) -> None:
    """Raise the error that came first. A rank that raised takes the others down with it (their collectives fail
    with errors that only echo the loss), so every error of the next moment is read and the earliest raised wins;
    a rank that died without a word (killed, or an exit code) is the cause before any of them."""
    first = errors[-1]
    limit = time.monotonic() + _GRACE
    while time.monotonic() < limit:
        try:
            rank, ok, data = results.get(timeout=_POLL)
            if not ok:
                errors.append((rank, *data))
        except queue.Empty:
            pass
        try:
            _check_exits(processes, {*values, *(error[0] for error in errors)})
        except LaunchError as cause:
            raise cause from LaunchError(*first[:4])
    rank, kind, message, trace = min(errors, key=lambda error: error[4])[:4]
    raise LaunchError(rank, kind, message, trace)


def _check_exits(processes: list, reported: set) -> None:
    """A rank killed by a signal or exited with a non-zero code before reporting fails the job (an exit with 0
    sends its result or error first)."""
    for rank, process in enumerate(processes):
        code = process.exitcode
        if not code or rank in reported:
            continue
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
            raise LaunchError(rank, 'Signal', f'rank {rank} was killed by signal {name}', '')
        raise LaunchError(rank, 'Exit', f'rank {rank} exited with code {code} before returning', '')


def _set_threads() -> None:
    """One torch thread per rank as torchrun does, or ``OMP_NUM_THREADS``: set through torch, since the rank is a
    fork of a process that imported torch (where the variable is read) before the rank's environment existed."""
    import torch
    text = os.environ.get('OMP_NUM_THREADS', '').strip()
    torch.set_num_threads(int(text) if text.isdigit() and int(text) > 0 else 1)


def _run(target: Callable | str, args: tuple, kwargs: dict) -> Any:
    """The target's return value (``None`` for a script); ``sys.exit()`` or ``sys.exit(0)`` returns ``None``, as a
    process that exits with code 0 succeeds."""
    try:
        if isinstance(target, str):
            sys.argv = [target, *map(str, args)]
            runpy.run_path(target, run_name='__main__')
            return None
        return target(*args, **kwargs)
    except SystemExit as stop:
        if stop.code in (None, 0):
            return None
        raise


def _worker(payload: bytes, env: dict, default_dtype: str, results: Any) -> None:
    """One rank: its environment and default dtype, the target, its result or error sent to the caller, the group
    destroyed."""
    rank = int(env['RANK'])
    try:
        os.environ.update(env)
        _set_threads()
        import torch
        torch.set_default_dtype(getattr(torch, default_dtype))
        message = (rank, True, dill.dumps(_run(*dill.loads(payload))))
    except BaseException as error:  # noqa: BLE001 - every failure goes to the caller
        stopped = (error.signal, error.requeued) if isinstance(error, RunStopped) else None
        message = (rank, False, (type(error).__name__, str(error), traceback.format_exc(), time.time(), stopped))
    results.put(message)
    from . import distributed
    distributed.shutdown()
    results.close()
    results.join_thread()
