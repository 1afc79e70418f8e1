"""Worker processes that outlive a run: ``WorkerPool``.

A pipeline keeps one pool in its state (``PipelineState.workers``) from its first ``target='processes'`` run until
it is dropped, ``reset('iter')`` or a run asks for another number of workers; the spawn and the imports (torch
takes seconds) are paid once, not per epoch or per run. Each run sends every worker it uses, once, a dill copy
of its process function (the first stage's runner: config, variables and models as they are when the run
starts); the dataset goes once for the pool's life, and again when a run finds it changed (its fingerprint,
``shared.fingerprint``: arrays changed in place included); then only item numbers and sub-indices go out, and
batches come back through ``shared.py``: their arrays in shared memory, mapped by the caller without a copy.

Workers are ``flowpipe.processes.Spawned`` processes (they never re-run the user's script, ignore the signals the
caller's run stops on, end with the caller, and are stopped by ``flowpipe.processes.stop``); functions and classes
of ``__main__`` or of a notebook cell reach them by value, through dill.
"""
from __future__ import annotations

import contextlib
import functools
import io
import itertools
import queue
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import dill

from ..errors import add_note
from ..processes import Spawned, Spec, hidden_main, release, stop
from .shared import dumps_shared, fingerprint, loads_shared

__all__ = ['WorkerPool', 'dump_error', 'hidden_main']

# A caller waiting for a result checks that the workers are alive this often.
_POLL_SECONDS = 0.1
# How long a worker asked to stop may take before it is killed.
_STOP_SECONDS = 5.0
_RUNS = itertools.count()


class WorkerPool:
    """``workers`` processes, each with its own task queue, and one result queue.

    ``keep(obj)`` makes ``obj`` travel to each worker once, and again after it changed: the runs' payloads refer to
    it instead of carrying it (a pipeline's dataset, which is part of its definition and can be large).
    ``start_run(process)`` begins a run (a new run number; results of earlier runs still on their way are dropped),
    ``submit(seq, item)`` sends item ``seq`` to the least busy worker, ``get(timeout)`` returns the next
    ``(seq, error, result)`` of the current run, ``end_run(wait)`` ends it (``in_use`` says whether a run is on).
    ``close()`` stops the workers; a pool nobody holds is closed when collected.

    Args:
        workers: number of worker processes (>= 1).
    """

    def __init__(self, workers: int):
        import torch.multiprocessing  # noqa: F401  (registers the tensor reductions shared.py relies on)
        launcher = Spawned()
        context = launcher.context()
        self.workers = workers
        self._results = context.Queue()
        self._tasks = [context.Queue() for _ in range(workers)]
        # The run the caller is on: a worker skips the items of runs left early instead of processing them.
        self._current = context.Value('q', -1, lock=False)
        self._processes: list = []
        self._run: int | None = None
        self._threads = 1
        self._payload = b''
        self._sent: set[int] = set()
        self._busy = [0] * workers
        self._owner: dict[int, int] = {}
        self.in_use = False
        self._kept: dict[int, Any] = {}              # id -> object, held so that no other object takes its id
        self._kept_sent: set[tuple[int, int]] = set()
        self._kept_marks: dict[int, tuple[bytes, bytes | None]] = {}     # id -> (fingerprint, its dill payload)
        # Registered first: workers started before a failure (or Ctrl-C) among the others are stopped too.
        self._finalizer = weakref.finalize(self, _stop, self._processes, self._tasks, self._results, self._current)
        try:
            for number, tasks in enumerate(self._tasks):
                self._processes.append(launcher.start(Spec(
                    _worker_loop, (tasks, self._results, self._current), f'flowpipe-worker-{number}',
                    ask=functools.partial(tasks.put, None), channels=(tasks,))))
        except BaseException:
            self.close(wait=False)
            raise

    @property
    def closed(self) -> bool:
        """Whether the workers have been stopped."""
        return not self._finalizer.alive

    def keep(self, obj: Any) -> None:
        """Send ``obj`` to each worker with its first item of a run, unless the worker has it as it is now (same
        fingerprint: one pass over its arrays, no copy); payloads then refer to it by id."""
        key = id(obj)
        self._kept.setdefault(key, obj)
        mark = fingerprint(obj)
        if self._kept_marks.get(key, (None,))[0] != mark:
            self._kept_marks[key] = (mark, None)
            self._kept_sent = {sent for sent in self._kept_sent if sent[1] != key}

    def start_run(self, process: Callable[[int, Any], Any]) -> None:
        """Begin a run whose items go through ``process``; it reaches each worker with that worker's first item."""
        if self.closed:
            raise RuntimeError("Expected a running WorkerPool. Received: a closed one. Make a new pool.")
        self._drain()
        self._run = self._current.value = next(_RUNS)
        self.in_use = True
        import torch
        # Some kernels' bits depend on the number of threads (interpolate): the workers use the caller's.
        self._threads = torch.get_num_threads()
        # recurse: a function of `__main__` takes the globals it uses along, not a reference to a `__main__` that
        # the worker does not have (the user's script is never run there).
        self._payload = _dumps_referring(process, self._kept)
        self._sent = set()

    def submit(self, seq: int, item: Any) -> None:
        """Send item ``seq`` of the current run to the worker with the fewest items in flight."""
        worker = min(range(self.workers), key=self._busy.__getitem__)
        if worker not in self._sent:
            for key in self._kept:
                if (worker, key) not in self._kept_sent:
                    self._tasks[worker].put(('keep', key, self._kept_payload(key)))
                    self._kept_sent.add((worker, key))
            self._tasks[worker].put(('run', self._run, self._payload, self._threads))
            self._sent.add(worker)
        self._tasks[worker].put(('item', self._run, seq, dill.dumps(item)))
        self._busy[worker] += 1
        self._owner[seq] = worker

    def _kept_payload(self, key: int) -> bytes:
        """The kept object's dill bytes, pickled once per change for all the workers."""
        mark, payload = self._kept_marks.get(key, (None, None))
        if payload is None:
            payload = dill.dumps(self._kept[key], recurse=True)
            self._kept_marks[key] = (mark, payload)
        return payload

    def get(self, timeout: float = _POLL_SECONDS) -> tuple[int, BaseException | None, Any] | None:
        """The next ``(seq, error, result)`` of the current run, or ``None`` after ``timeout`` seconds without one.

        Raises ``RuntimeError`` when a worker process has died (killed, out of memory, a crash in C code).
        """
        while True:
            message = _receive(self._results, timeout)
            if message is None:
                self._check_alive()
                return None
            run, seq, ok, payload = message
            if run != self._run:
                _discard(ok, payload)
                continue
            worker = self._owner.pop(seq, None)
            if worker is not None:
                self._busy[worker] -= 1
            return (seq, *_decode(ok, payload))

    def end_run(self, wait: bool = False) -> None:
        """Forget the current run: its results still to come are dropped, and their shared blocks freed.

        ``wait`` (a failed run): first take in the replies to the items still in the workers' hands (the one being
        processed is finished, the queued ones skipped), so that no worker goes on with the run after it ended;
        as long as the workers live, and ``_STOP_SECONDS`` at most after the last reply.
        """
        run, outstanding = self._run, set(self._owner)
        self._run, self._current.value, self.in_use = None, -1, False
        quiet_since = time.monotonic()
        while wait and outstanding and not self.closed and time.monotonic() - quiet_since < _STOP_SECONDS:
            message = _receive(self._results, _POLL_SECONDS)
            if message is None:
                if any(not process.alive for process in self._processes):
                    break
                continue
            got, seq, ok, payload = message
            quiet_since = time.monotonic()
            if got == run:
                outstanding.discard(seq)
            _discard(ok, payload)
        self._drain()

    def close(self, wait: bool = True) -> None:
        """Stop and join every worker: after its current item, or (``wait=False``: Ctrl-C) at once. Idempotent.

        A worker that does not stop in time is killed.
        """
        if not wait and not self.closed:
            stop(self._processes, _STOP_SECONDS, now=True)
        self._finalizer()
        # The queues' semaphores are files in /dev/shm until the queues are collected: a closed pool kept by a
        # pipeline must not keep them.
        self._tasks, self._results = [], None

    def _drain(self) -> None:
        """Take in the results that are already there, of runs that are over."""
        while not self.closed:
            try:
                run, seq, ok, payload = self._results.get_nowait()
            except queue.Empty:
                break
            worker = self._owner.pop(seq, None) if run == self._run else None
            if worker is not None:
                self._busy[worker] -= 1
            _discard(ok, payload)
        if self._run is None:
            self._owner.clear()
            self._busy = [0] * self.workers

    def _check_alive(self) -> None:
        for process in self._processes:
            if not process.alive:
                self.close()
                raise RuntimeError(f"Expected the worker processes to run until the run ends. Received: "
                                   f"{process.name} exited with code {process.exitcode}. Look for a crash in C "
                                   f"code or the system killing it for memory; run with target='threads' to see "
                                   f"the error in this process.")


def _stop(processes: list, tasks: list, results: Any, current: Any) -> None:
    current.value = -1                    # the items still queued are skipped
    stop(processes, _STOP_SECONDS)
    release([*tasks, results])            # every reader is gone: the feeder threads end, and free the semaphores


class _ReferringPickler(dill.Pickler):
    """Writes the kept objects as references (their ids) that the workers resolve to their own copies."""

    def __init__(self, file: Any, kept: dict[int, Any]):
        super().__init__(file, recurse=True)
        self.kept = kept

    def persistent_id(self, obj: Any) -> int | None:
        key = id(obj)
        return key if key in self.kept and self.kept[key] is obj else None


def _dumps_referring(obj: Any, kept: dict[int, Any]) -> bytes:
    buffer = io.BytesIO()
    _ReferringPickler(buffer, kept).dump(obj)
    return buffer.getvalue()


class _ReferenceUnpickler(dill.Unpickler):
    def __init__(self, file: Any, kept: dict[int, Any]):
        super().__init__(file)
        self.kept = kept

    def persistent_load(self, key: int) -> Any:
        return self.kept[key]


def _receive(channel: Any, timeout: float) -> tuple | None:
    """The next message of ``channel``, or ``None`` after ``timeout`` seconds. An error (Ctrl-C, a dead worker's)
    is raised outside multiprocessing's frames: a kept error (a notebook's last traceback) must not hold the queue,
    whose semaphores stay files in /dev/shm until it is collected."""
    interrupted = False
    try:
        return channel.get(timeout=timeout)
    except queue.Empty:
        return None
    except KeyboardInterrupt:
        interrupted = True
    if interrupted:
        del channel                                 # not in the traceback's frame either
        raise KeyboardInterrupt
    return None


def _discard(ok: bool | None, payload: bytes) -> None:
    # Loading a result fetches its shared blocks from the worker, which frees them there; dropping it frees them.
    if ok is None:                                  # an item skipped: nothing came with it
        return
    with contextlib.suppress(Exception):
        _decode(ok, payload)


def _decode(ok: bool, payload: bytes) -> tuple[BaseException | None, Any]:
    """``(error, result)`` of a worker's reply."""
    try:
        decoded = loads_shared(payload)
    except BaseException as failure:                # unresolved, the item would keep the caller waiting forever
        add_note(failure, "flowpipe: what the worker process sent back does not unpickle in the caller")
        return failure, None
    if ok:
        return None, decoded
    error, text = decoded
    add_note(error, f"Traceback in the worker process:\n{text}")
    return error, None


# ----- in the worker process -----

def _worker_loop(tasks: Any, results: Any, current: Any) -> None:
    """Serve items until the ``None`` message or the caller's death: ``('keep', key, payload)`` loads an object
    the runs refer to, ``('run', run, payload, threads)`` sets the process function of a run and torch's number of
    threads, ``('item', run, seq, item)`` processes one item and replies ``(run, seq, ok, payload)``, or
    ``(run, seq, None, b'')`` for an item of a run left early (skipped)."""
    import torch
    process: Any = None
    kept: dict[int, Any] = {}
    while True:
        try:
            message = tasks.get()
        except (EOFError, OSError):
            return
        if message is None:
            results.cancel_join_thread()  # the caller reads no more: exit without flushing replies
            return
        if message[0] == 'keep':
            kept[message[1]] = _load(message[2])
            continue
        if message[0] == 'run':
            process = _load(message[2], kept)
            torch.set_num_threads(message[3])
            continue
        _, run, seq, item = message
        if run != current.value:        # a run left early: nobody waits for this item
            results.put((run, seq, None, b''))
            continue
        try:
            if isinstance(process, BaseException):
                raise process
            ok, payload = True, dumps_shared(process(seq, dill.loads(item)))
        except BaseException as error:   # shipped back to the caller, which decides what it means
            ok, payload = False, dump_error(error)
        results.put((run, seq, ok, payload))


def _load(payload: bytes, kept: dict[int, Any] | None = None) -> Any:
    """A run's process function (or a kept object), or the error that loading it raised (reported with each of
    the run's items)."""
    try:
        if kept is None:
            return dill.loads(payload)
        if any(isinstance(obj, BaseException) for obj in kept.values()):
            raise next(obj for obj in kept.values() if isinstance(obj, BaseException))
        return _ReferenceUnpickler(io.BytesIO(payload), kept).load()
    except Exception as error:
        add_note(error, "flowpipe: the run's actions, dataset or variables do not unpickle in a worker process")
        return error


def dump_error(error: BaseException) -> bytes:
    """``(error, its traceback text)`` as dill bytes; an error that does not unpickle travels as a RuntimeError."""
    text = ''.join(traceback.format_exception(error))
    try:
        payload = dill.dumps((error, text))
        dill.loads(payload)              # an exception whose __init__ wants other args pickles but does not load
    except Exception:                    # one that does not travel still reports what happened
        payload = dill.dumps((RuntimeError(f"{type(error).__name__}: {error}"), text))
    return payload
