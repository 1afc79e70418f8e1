"""Prefetcher: process items ahead in a worker pool and deliver the results in order.

``Prefetcher(items, process, size)`` numbers the items (``seq`` 0, 1, 2...), keeps up to ``size`` of them in
flight in one pool made for this prefetcher, and yields ``process(seq, item)`` results in ``seq`` order.
``size=0`` runs everything in the caller's thread with the same semantics. Outcomes, exceptions included, travel
through one result queue, so the caller re-raises a worker's exception with its own type and traceback, plus a
note naming the batch.

Control flow from ``process``: ``SkipBatch`` drops that result; ``StopPipeline`` ends the iteration after the
earlier results. Anything else stops the run: nothing new is started, the pool is shut down, the exception is
raised in the caller.

``target='processes'`` runs ``process`` in worker processes instead (``workers.WorkerPool``: ``process`` is sent
to each worker once, with dill; the items go with dill too; the results come back with their arrays in shared
memory). A pool given with ``pool=`` (a pipeline's, kept between runs) is left running when the prefetcher
closes, unless the caller was interrupted (``KeyboardInterrupt``); without one the prefetcher starts its own and
stops it on close. Changes a worker makes to its own copy of variables or models do not come back to the caller:
only the returned results do.
"""
from __future__ import annotations

import itertools
import queue
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from ..errors import SkipBatch, StopPipeline, add_note
from .nodes import Node

if TYPE_CHECKING:
    from .workers import WorkerPool

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
        pool: with ``target='processes'``, a ``WorkerPool`` to run on (not stopped on close); else one of
            ``workers`` processes is started, and stopped on close.
        on_close: called once when the prefetcher closes, before the workers are joined (for example
            ``OrderedLocks.close``, to wake workers waiting on a lock).
    """

    def __init__(self, items: Iterable[Any], process: Callable[[int, Any], Any], size: int, *,
                 target: str = 'threads', workers: int | None = None, pool: WorkerPool | None = None,
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
        self._processes: WorkerPool | None = None
        if size and target == 'processes':
            processes = pool if pool is not None else _new_worker_pool(self.workers)
            # A pool given is only released by this prefetcher, one of its own is stopped with it.
            self._finalizer = weakref.finalize(self, processes.end_run if pool is not None else processes.close)
            try:
                processes.start_run(process)
            except BaseException:
                self._finalizer()
                raise
            self._processes = processes
        elif size:
            self._pool = _Pool(ThreadPoolExecutor(self.workers, thread_name_prefix=_THREAD_PREFIX), on_close)
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

    @property
    def ready(self) -> int:
        """How many finished results are waiting to be delivered."""
        if self._closed or (self._pool is None and self._processes is None):
            return 0
        return len(self._pending) + (self._pool.results.qsize() if self._pool is not None else 0)

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
        if self._processes is not None:
            self._finalizer()
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
        return self._run_inline() if self._pool is None and self._processes is None else self._run_pool()

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
        except KeyboardInterrupt:
            if self._processes is not None:          # workers may be deep in a long item: stop them, not wait
                self._processes.close(wait=False)
            raise
        except Exception:
            if self._processes is not None:          # a failed run: no worker goes on with its items afterwards
                self._processes.end_run(wait=True)
            raise
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
        if self._processes is not None:
            self._processes.submit(seq, item)
            return True
        pool = self._pool
        future = pool.executor.submit(self._process, seq, item)
        future.add_done_callback(lambda done, seq=seq: pool.deliver(seq, done))
        return True

    def _wait_for(self, seq: int) -> tuple[BaseException | None, Any]:
        """Block until the outcome of item ``seq`` arrives; stash the others that arrive first."""
        while seq not in self._pending:
            if self._closed:
                raise RuntimeError("The prefetcher was closed while the caller was waiting for a result.")
            outcome = self._next_outcome()
            if outcome is None:
                continue
            got, error, result = outcome
            self._pending[got] = (error, result)
            self._stopping |= error is not None and not isinstance(error, SkipBatch)
        return self._pending.pop(seq)


    def _next_outcome(self) -> tuple[int, BaseException | None, Any] | None:
        """The next ``(seq, error, result)`` to finish, or ``None`` after a short wait."""
        if self._processes is not None:
            return self._processes.get(_POLL_SECONDS)
        try:
            return self._pool.results.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            return None


def _new_worker_pool(workers: int) -> WorkerPool:
    from .workers import WorkerPool                 # imports torch: only where processes are asked for
    return WorkerPool(workers)
