"""Prefetcher: process items ahead in a worker pool and deliver the results in order.

``Prefetcher(items, process, size)`` numbers the items (``seq`` 0, 1, 2...), keeps up to ``size`` of them in
flight in one pool made for this prefetcher, and yields ``process(seq, item)`` results in ``seq`` order.
``size=0`` runs everything in the caller's thread with the same semantics. Outcomes, exceptions included, travel
through one result queue, so the caller re-raises a worker's exception with its own type and traceback, plus a
note naming the batch.

Control flow from ``process``: ``SkipBatch`` drops that result; ``StopPipeline`` ends the iteration after the
earlier results. Anything else stops the run: nothing new is started, the pool is shut down, the exception is
raised in the caller.

``target='processes'`` runs ``process`` in a process pool instead (``process`` and the items are serialized
with dill). Changes a worker makes to its own copy of variables or models do not come back to the caller: only
the returned results do.
"""
from __future__ import annotations

import itertools
import multiprocessing
import queue
import re
import threading
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import dill

from ..errors import SkipBatch, StopPipeline, add_note
from .nodes import Node

__all__ = ['Prefetcher']

TARGETS = ('threads', 'processes')
_THREAD_PREFIX = 'flowpipe-prefetch'
# A consumer waiting for a result checks for cancellation this often.
_POLL_SECONDS = 0.1


def _note_batch(exc: BaseException, seq: int) -> None:
    # The action runner may have named the batch already, together with the action.
    if not any(re.search(rf'\bbatch {seq}\b', note) for note in getattr(exc, '__notes__', ())):
        add_note(exc, f"(raised while processing batch {seq})")


class _Pool:
    """The workers and the result queue of one prefetcher.

    Kept apart from ``Prefetcher`` so that worker callbacks never reference the prefetcher itself: a prefetcher
    nobody holds any more is garbage-collected and its finalizer shuts this pool down.
    """

    def __init__(self, executor: Executor, on_close: Callable[[], None] | None):
        self.executor = executor
        self.results: queue.Queue = queue.Queue()
        self.on_close = on_close

    def deliver(self, seq: int, future: Future) -> None:
        """Put a finished future's outcome in the result queue (runs in whichever thread completed it)."""
        if future.cancelled():
            return
        error = future.exception()
        self.results.put((seq, error, None if error is not None else future.result()))

    def shutdown(self) -> None:
        """Cancel pending items, wake waiters (``on_close``) and join every worker; called once, by the
        prefetcher's ``weakref.finalize``."""
        if self.on_close is not None:
            self.on_close()
        # A finalizer may run in a worker thread, which cannot join itself.
        in_worker = threading.current_thread().name.startswith(_THREAD_PREFIX)
        self.executor.shutdown(wait=not in_worker, cancel_futures=True)


class Prefetcher(Node):
    """Iterate over ``process(seq, item)`` for each item, computed up to ``size`` items ahead.

    As a run's node (``flowpipe.execution.nodes``), its state is the number of the next item to deliver and the
    state its ``items`` node had when that item was drawn; items drawn ahead are drawn again after loading it.

    Args:
        items: the items to process (for example the sub-indices of the batches).
        process: ``process(seq, item) -> result``, called in worker threads (or processes).
        size: how many items may be in flight at once; 0 runs ``process`` in the caller's thread.
        target: ``'threads'`` or ``'processes'``.
        workers: number of workers; defaults to ``size``.
        on_close: called once when the prefetcher closes, before the workers are joined (for example
            ``OrderedLocks.close``, to wake workers waiting on a lock).
    """

    def __init__(self, items: Iterable[Any], process: Callable[[int, Any], Any], size: int, *,
                 target: str = 'threads', workers: int | None = None,
                 on_close: Callable[[], None] | None = None):
        self._check_args(process, size, target, workers)
        self._items = iter(items)
        self.source = items if isinstance(items, Node) else None
        self._start = self._next = 0
        self._snapshots: dict[int, dict] = {}
        self._delivered = self.source.state() if self.source is not None else None
        self._process = process
        self.size = size
        self.target = target
        self.workers = (workers or size) if size else 0
        self._started = False
        self._stopping = False
        self._exhausted = False
        self._pending: dict[int, tuple[BaseException | None, Any]] = {}
        self._pool: _Pool | None = None
        self._on_close = on_close
        self._closed = False
        if size:
            self._pool = _Pool(self._make_executor(), on_close)
            self._finalizer = weakref.finalize(self, self._pool.shutdown)

    @staticmethod
    def _check_args(process: Any, size: Any, target: Any, workers: Any) -> None:
        if not callable(process):
            raise TypeError(f"Expected process to be a callable process(seq, item). Received: {process!r}.")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"Expected size to be an int >= 0 (items in flight). Received: size={size!r}.")
        if target not in TARGETS:
            raise ValueError(f"Expected target to be one of {TARGETS}. Received: target={target!r}.")
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"Expected workers to be a positive int or None. Received: workers={workers!r}.")

    def _make_executor(self) -> Executor:
        if self.target == 'threads':
            return ThreadPoolExecutor(self.workers, thread_name_prefix=_THREAD_PREFIX)
        # 'spawn': forking a process that runs torch threads can deadlock the child.
        return ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context('spawn'),
                                   initializer=_init_process_worker, initargs=(dill.dumps(self._process),))

    @property
    def ready(self) -> int:
        """How many finished results are waiting to be delivered."""
        if self._pool is None or self._closed:
            return 0
        return len(self._pending) + self._pool.results.qsize()

    @property
    def closed(self) -> bool:
        """Whether the prefetcher has been closed."""
        return self._closed

    def close(self) -> None:
        """Cancel the items not started, wake anything blocked, join every worker. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._pool is not None:
            self._finalizer()
        elif self._on_close is not None:
            self._on_close()
        self._pending.clear()
        if self.source is not None:
            self.source.close()

    def state(self) -> dict:
        """``{'seq': next item's number, 'source': the items' state as that item was drawn}``."""
        return {'seq': self._next, 'source': self._delivered}

    def load_state(self, state: dict) -> None:
        """Number items from ``state['seq']`` on and load the items' node; before iterating."""
        if self._started:
            raise RuntimeError("Expected load_state before the Prefetcher is iterated. Received: a started one.")
        self._start = self._next = int(state['seq'])
        if self.source is not None:
            self.source.load_state(state['source'])
        self._delivered = state['source']

    def _drawn(self, seq: int) -> None:
        if self.source is not None:
            self._snapshots[seq] = self.source.state()

    def _passed(self, seq: int) -> None:
        """Item ``seq`` is delivered (or skipped, or ended the run): the state moves past it."""
        self._next = seq + 1
        self._delivered = self._snapshots.pop(seq, self._delivered)

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        if self._started:
            raise RuntimeError("Expected a fresh Prefetcher: this one has already been iterated. "
                               "Make a new Prefetcher for each run.")
        self._started = True
        return self._run_inline() if self._pool is None else self._run_pool()

    def _run_inline(self) -> Iterator[Any]:
        try:
            for seq, item in enumerate(self._items, self._start):
                if self._closed:
                    return
                self._drawn(seq)
                try:
                    result = self._process(seq, item)
                except SkipBatch:
                    self._passed(seq)
                    continue
                except StopPipeline:
                    self._passed(seq)
                    return
                except BaseException as error:
                    _note_batch(error, seq)
                    raise
                self._passed(seq)
                yield result
        finally:
            self.close()

    def _run_pool(self) -> Iterator[Any]:
        if self._closed:
            return
        try:
            submitted = self._start
            for seq in itertools.count(self._start):
                # Keep `size` items in flight, the one about to be delivered included; start nothing new once
                # an item has failed or stopped the run.
                while submitted - seq < self.size and not self._stopping and self._submit(submitted):
                    submitted += 1
                if seq >= submitted:
                    return
                error, result = self._wait_for(seq)
                if error is None or isinstance(error, (SkipBatch, StopPipeline)):
                    self._passed(seq)
                if error is None:
                    yield result
                elif isinstance(error, StopPipeline):
                    return
                elif not isinstance(error, SkipBatch):
                    _note_batch(error, seq)
                    raise error
        finally:
            self.close()

    def _submit(self, seq: int) -> bool:
        """Start item ``seq``; False when there are no more items."""
        if self._exhausted:
            return False
        try:
            item = next(self._items)
        except StopIteration:
            self._exhausted = True
            return False
        self._drawn(seq)
        pool = self._pool
        if self.target == 'threads':
            future = pool.executor.submit(self._process, seq, item)
        else:
            future = pool.executor.submit(_run_in_process, seq, dill.dumps(item))
            future = _unwrap_process_future(future)
        future.add_done_callback(lambda done, seq=seq: pool.deliver(seq, done))
        return True

    def _wait_for(self, seq: int) -> tuple[BaseException | None, Any]:
        """Block until the outcome of item ``seq`` arrives; stash the others that arrive first."""
        pool = self._pool
        while seq not in self._pending:
            if self._closed:
                raise RuntimeError("The prefetcher was closed while the caller was waiting for a result.")
            try:
                got, error, result = pool.results.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                continue
            self._pending[got] = (error, result)
            self._stopping |= error is not None and not isinstance(error, SkipBatch)
        return self._pending.pop(seq)


# ----- process target -----

_WORKER_PROCESS: Callable[[int, Any], Any] | None = None


def _init_process_worker(process_bytes: bytes) -> None:
    global _WORKER_PROCESS
    _WORKER_PROCESS = dill.loads(process_bytes)


def _run_in_process(seq: int, item_bytes: bytes) -> tuple[bool, bytes]:
    """Run in a worker process: returns (ok, dill bytes of the result or of (exception, traceback text))."""
    try:
        return True, dill.dumps(_WORKER_PROCESS(seq, dill.loads(item_bytes)))
    except BaseException as error:       # shipped back to the caller, which decides what it means
        text = ''.join(traceback.format_exception(error))
        try:
            payload = dill.dumps((error, text))
            dill.loads(payload)          # an exception whose __init__ wants other args pickles but does not load
        except Exception:                # one that does not travel still reports what happened
            payload = dill.dumps((RuntimeError(f"{type(error).__name__}: {error}"), text))
        return False, payload


def _unwrap_process_future(future: Future) -> Future:
    """A future that resolves to the decoded result, or fails with the worker's exception."""
    unwrapped: Future = Future()

    def _copy(done: Future) -> None:
        if done.cancelled():            # nobody waits for a cancelled item
            return
        error = done.exception()
        if error is None:
            ok, payload = done.result()
            try:
                decoded = dill.loads(payload)
            except BaseException as failure:     # unresolved, the future would keep the caller waiting forever
                add_note(failure, "flowpipe: what the worker process sent back does not unpickle in the caller")
                error = failure
            else:
                if ok:
                    unwrapped.set_result(decoded)
                    return
                error, text = decoded
                add_note(error, f"Traceback in the worker process:\n{text}")
        unwrapped.set_exception(error)

    future.add_done_callback(_copy)
    return unwrapped
