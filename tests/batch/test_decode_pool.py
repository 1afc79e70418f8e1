"""The decode pool: results in item order whatever its size, errors raised in item order, idle threads exit."""
import threading
import time

import pytest

from flowpipe.batch.decode_pool import IDLE_SECONDS, DecodePool, decode_pool, pool_size


@pytest.mark.parametrize('size', [1, 2, 5])
def test_map_gives_results_in_item_order(size):
    assert DecodePool(size).map(lambda x: x * x, list(range(20))) == [x * x for x in range(20)]


def test_map_raises_the_first_error_in_item_order_after_every_task_ended():
    ended = []

    def work(x):
        time.sleep(0.01 * (5 - x))
        ended.append(x)
        if x in (1, 3):
            raise KeyError(x)
        return x
    with pytest.raises(KeyError, match='1'):
        DecodePool(3).map(work, list(range(5)))
    assert sorted(ended) == list(range(5))


def test_maps_from_many_threads_share_at_most_size_threads():
    pool, seen, lock = DecodePool(2), set(), threading.Lock()

    def work(x):
        with lock:
            seen.add(threading.current_thread().name)
        time.sleep(0.001)
        return x
    results = {}
    callers = [threading.Thread(target=lambda k=k: results.setdefault(k, pool.map(work, list(range(10)))))
               for k in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert all(results[k] == list(range(10)) for k in range(4))
    assert len(seen) <= 2 * 4 and pool._threads <= 2   # threads may be replaced after idling, never more at once


def test_idle_threads_exit():
    pool = DecodePool(2)
    pool.map(lambda x: x, [1, 2, 3])
    deadline = time.monotonic() + IDLE_SECONDS + 5
    while pool._threads and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool._threads == 0
    assert pool.map(lambda x: x + 1, [1, 2]) == [2, 3]


def test_the_process_pool_has_one_thread_per_core_and_bad_sizes_are_refused():
    assert decode_pool() is decode_pool() and decode_pool().size == pool_size() >= 1
    with pytest.raises(ValueError, match='Expected a positive int'):
        DecodePool(0)


def test_a_map_inside_a_task_runs_inline_instead_of_waiting_on_the_pool():
    pool = DecodePool(2)
    inner = lambda x: pool.map(lambda y: x * 10 + y, [0, 1, 2])  # noqa: E731
    assert pool.map(inner, [1, 2, 3, 4]) == [[10, 11, 12], [20, 21, 22], [30, 31, 32], [40, 41, 42]]
