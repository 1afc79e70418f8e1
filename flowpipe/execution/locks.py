"""Ordered locks: locked actions run for one batch at a time, in batch order.

Batches are numbered in delivery order (``seq`` 0, 1, 2...). ``OrderedLocks.acquire(key, seq)`` lets batch
``seq`` in only after every earlier batch has released ``key`` or finished (skipped, failed or done), so a run
with prefetch updates models and variables in exactly the order of a run without it. With prefetch off the
batches arrive in order and nobody ever waits.

Use one key per locked action or ordered group of actions: releasing a key means the batch is done with it.
``enter``/``leave`` serve a group entered at several points: ``enter`` does nothing when the batch is inside
already, ``leave`` also lets later batches pass a batch that never entered. The runner wraps each batch in
``running(seq)``, which finishes the batch however it ends.
"""
from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager

from ..errors import SkipBatch

__all__ = ['LockCancelled', 'OrderedLocks']

# Waits wake up this often even without a notification, so a missed wake-up costs a delay, never a hang.
_POLL_SECONDS = 0.1


class LockCancelled(RuntimeError):
    """A wait on an ordered lock was cancelled: the locks were closed or an earlier batch stopped the run."""


class _KeyState:
    """Which batches are done with one key: all below ``mark``, plus those in ``released``."""

    __slots__ = ('mark', 'released', 'holder')

    def __init__(self, mark: int):
        self.mark = mark
        self.released: set[int] = set()
        self.holder: int | None = None


class OrderedLocks:
    """Per-key locks entered in batch order.

    Args:
        start: number of the first batch.
    """

    def __init__(self, start: int = 0):
        self._cond = threading.Condition(threading.Lock())
        self._keys: dict[Hashable, _KeyState] = {}
        self._finished: set[int] = set()
        self._finished_mark = start     # every seq below it has finished
        self._start = start
        self._cancel_above: float = float('inf')
        self._closed = False

    def acquire(self, key: Hashable, seq: int) -> None:
        """Block until every batch before ``seq`` has released ``key`` or finished, then hold ``key``.

        Raises:
            LockCancelled: the locks were closed, or a batch before ``seq`` stopped the run.
            ValueError: ``seq`` has already finished or already released ``key``.
        """
        with self._cond:
            state = self._key_state(key)
            self._check_can_acquire(key, seq, state)
            while not self._cancelled(seq) and not self._passed(state, seq):
                self._cond.wait(_POLL_SECONDS)
            if self._cancelled(seq):
                raise LockCancelled(f"Wait of batch {seq} for lock {key!r} was cancelled: the run is stopping.")
            state.holder = seq

    def release(self, key: Hashable, seq: int) -> None:
        """Mark ``seq`` done with ``key`` and let the next batch in.

        Raises:
            ValueError: ``seq`` does not hold ``key``.
        """
        with self._cond:
            state = self._keys.get(key)
            if state is None or state.holder != seq:
                holder = None if state is None else state.holder
                raise ValueError(f"Expected batch {seq} to hold lock {key!r}. Received: holder={holder!r}. "
                                 "Release only a lock acquired by the same batch.")
            state.holder = None
            state.released.add(seq)
            self._cond.notify_all()

    def enter(self, key: Hashable, seq: int) -> None:
        """``acquire``, unless ``seq`` holds ``key`` already (an ordered region entered at several points)."""
        with self._cond:
            state = self._keys.get(key)
            if state is not None and state.holder == seq:
                return
        self.acquire(key, seq)

    def leave(self, key: Hashable, seq: int) -> None:
        """Mark ``seq`` done with ``key``: release it if held, else let later batches pass without ``seq``."""
        with self._cond:
            state = self._key_state(key)
            if state.holder == seq:
                state.holder = None
            if seq >= state.mark and seq >= self._finished_mark:
                state.released.add(seq)
            self._cond.notify_all()

    def finish(self, seq: int) -> None:
        """Mark ``seq`` done with every key: the keys it holds are released, the others passed."""
        with self._cond:
            self._finished.add(seq)
            while self._finished_mark in self._finished:
                self._finished.discard(self._finished_mark)
                self._finished_mark += 1
            for state in self._keys.values():
                if state.holder == seq:
                    state.holder = None
                    state.released.add(seq)
            self._cond.notify_all()

    def cancel_after(self, seq: int) -> None:
        """Refuse the locks to every batch after ``seq``: waiting ones and later ones get ``LockCancelled``.

        Called when batch ``seq`` stops the run, so batches already prefetched beyond it do not update
        models or variables that a run without prefetch would never have touched.
        """
        with self._cond:
            self._cancel_above = min(self._cancel_above, seq)
            self._cond.notify_all()

    def close(self) -> None:
        """Wake every waiter with ``LockCancelled``; later acquisitions fail too. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    @contextmanager
    def hold(self, key: Hashable, seq: int) -> Iterator[None]:
        """Hold ``key`` for batch ``seq`` inside a ``with`` block."""
        self.acquire(key, seq)
        try:
            yield
        finally:
            self.release(key, seq)

    @contextmanager
    def running(self, seq: int) -> Iterator[None]:
        """Process batch ``seq`` inside a ``with`` block: it finishes however the block ends.

        An exception other than ``SkipBatch`` (an error or ``StopPipeline``) also cancels the locks for the
        batches after ``seq``.
        """
        try:
            yield
        except SkipBatch:
            raise
        except BaseException:
            self.cancel_after(seq)
            raise
        finally:
            self.finish(seq)

    def _key_state(self, key: Hashable) -> _KeyState:
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _KeyState(self._start)
        return state

    def _check_can_acquire(self, key: Hashable, seq: int, state: _KeyState) -> None:
        if seq < self._finished_mark or seq in self._finished:
            raise ValueError(f"Expected a batch that has not finished. Received: seq={seq!r} for lock {key!r}. "
                             "Acquire locks before calling finish(seq).")
        if seq in state.released or state.holder == seq or seq < state.mark:
            raise ValueError(f"Expected each batch to take lock {key!r} once. Received: seq={seq!r} again. "
                             "Use one key per locked action.")

    def _cancelled(self, seq: int) -> bool:
        return self._closed or seq > self._cancel_above

    def _passed(self, state: _KeyState, seq: int) -> bool:
        """Whether every batch before ``seq`` is done with the key; advances the key's mark as a side effect."""
        state.mark = max(state.mark, self._finished_mark)
        while state.mark < seq and (state.mark in state.released or state.mark in self._finished):
            state.released.discard(state.mark)
            state.mark += 1
        return state.mark >= seq and state.holder is None
