"""OrderedLocks: batch-ordered entry, out-of-order finishing, cancellation."""
import random
import threading
import time

import pytest

from flowpipe.errors import SkipBatch, StopPipeline
from flowpipe.execution.locks import LockCancelled, OrderedLocks

# A hang fails the test instead of the suite.

WAIT = 10.0


def _start(target, *args):
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _join(*threads):
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a thread is still blocked on an ordered lock"


def test_in_order_never_waits():
    locks = OrderedLocks()
    for seq in range(5):
        with locks.hold('train', seq):
            pass
        locks.finish(seq)


def test_later_batch_waits_for_earlier_release():
    locks = OrderedLocks()
    entered = threading.Event()

    def later():
        with locks.hold('train', 1):
            entered.set()

    thread = _start(later)
    assert not entered.wait(0.2), "batch 1 entered before batch 0 released the lock"
    locks.acquire('train', 0)
    assert not entered.wait(0.1)
    locks.release('train', 0)
    assert entered.wait(WAIT)
    _join(thread)


def test_finish_passes_keys_never_acquired():
    locks = OrderedLocks()
    entered = threading.Event()
    thread = _start(lambda: (locks.acquire('train', 2), entered.set()))
    locks.finish(1)           # out of order: batch 1 (skipped) finishes before batch 0
    assert not entered.wait(0.2)
    locks.finish(0)
    assert entered.wait(WAIT)
    _join(thread)
    locks.release('train', 2)


def test_keys_are_independent():
    locks = OrderedLocks()
    locks.acquire('a', 0)
    locks.release('a', 0)
    done = threading.Event()
    # batch 1 may take 'a' (batch 0 released it) although batch 0 still runs and may take 'b'
    thread = _start(lambda: (locks.acquire('a', 1), done.set()))
    assert done.wait(WAIT)
    _join(thread)


def test_random_threads_enter_in_batch_order():
    locks = OrderedLocks()
    order = {'first': [], 'second': []}

    def batch(seq):
        rng = random.Random(seq)
        with locks.running(seq):
            time.sleep(rng.random() * 0.005)
            if seq % 7 == 3:
                return                      # never takes any lock, like a skipped batch
            for key in order:
                with locks.hold(key, seq):
                    order[key].append(seq)
                time.sleep(rng.random() * 0.002)

    threads = [_start(batch, seq) for seq in reversed(range(40))]
    _join(*threads)
    expected = [seq for seq in range(40) if seq % 7 != 3]
    assert order['first'] == expected
    assert order['second'] == expected


def test_close_wakes_waiters_with_cancellation():
    locks = OrderedLocks()
    errors = []

    def waiter():
        try:
            locks.acquire('train', 3)
        except LockCancelled as error:
            errors.append(error)

    thread = _start(waiter)
    time.sleep(0.05)
    locks.close()
    _join(thread)
    assert len(errors) == 1 and 'batch 3' in str(errors[0])
    assert locks.closed
    with pytest.raises(LockCancelled, match='cancelled'):
        locks.acquire('other', 0)
    locks.close()                           # idempotent


def test_running_cancels_later_batches_on_error_but_not_on_skip():
    locks = OrderedLocks()
    with pytest.raises(SkipBatch):
        with locks.running(0):
            raise SkipBatch
    with locks.hold('train', 1):            # a skip does not cancel
        pass
    locks.finish(1)
    with pytest.raises(StopPipeline):
        with locks.running(2):
            raise StopPipeline
    with pytest.raises(LockCancelled, match='batch 3'):
        locks.acquire('train', 3)
    with pytest.raises(ValueError, match='has not finished'):
        locks.acquire('train', 2)           # batch 2 finished: entering now is a bug


def test_release_by_non_holder_names_the_problem():
    locks = OrderedLocks()
    with pytest.raises(ValueError, match=r"batch 0 to hold lock 'train'"):
        locks.release('train', 0)
    locks.acquire('train', 0)
    with pytest.raises(ValueError, match='holder=0'):
        locks.release('train', 1)


def test_same_key_twice_in_one_batch_is_refused():
    locks = OrderedLocks()
    with locks.hold('train', 0):
        pass
    with pytest.raises(ValueError, match='one key per locked action'):
        locks.acquire('train', 0)


def test_finish_releases_held_keys():
    locks = OrderedLocks()
    locks.acquire('train', 0)
    locks.finish(0)
    locks.acquire('train', 1)               # would block if batch 0 still held the key
    locks.release('train', 1)


def test_start_offset():
    locks = OrderedLocks(start=10)
    locks.acquire('train', 10)
    locks.release('train', 10)
    locks.finish(10)
    locks.acquire('train', 11)


def test_enter_is_idempotent_and_leave_releases_or_passes():
    locks = OrderedLocks()
    locks.enter('group', 0)
    locks.enter('group', 0)           # a second write point of the same batch: already inside
    entered = threading.Event()
    thread = _start(lambda: (locks.enter('group', 2), entered.set()))
    locks.leave('group', 0)
    assert not entered.wait(0.2), "batch 2 entered before batch 1 left"
    locks.leave('group', 1)           # batch 1 never entered (its write did not happen): it lets batch 2 pass
    assert entered.wait(WAIT)
    _join(thread)
    locks.leave('group', 2)
    locks.leave('group', 2)           # idempotent
    locks.enter('group', 3)
    locks.finish(3)
