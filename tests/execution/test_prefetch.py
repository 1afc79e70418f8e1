"""Prefetcher: order, control flow, errors, shutdown in every way a run can end."""
import _thread
import gc
import itertools
import random
import threading
import time
import traceback

import pytest

from flowpipe.errors import SkipBatch, StopPipeline
from flowpipe.execution.locks import OrderedLocks
from flowpipe.execution.prefetch import Prefetcher

# A hang fails the test instead of the suite.

WAIT = 10.0


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith('flowpipe-prefetch')]


def _assert_no_prefetch_threads():
    deadline = time.monotonic() + WAIT
    while _prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _prefetch_threads(), f"prefetch threads left: {_prefetch_threads()}"


def _jitter(seq, item):
    time.sleep(random.Random(seq).random() * 0.01)
    return item * 10


def _control_flow(seq, item):
    if item % 4 == 1:
        raise SkipBatch
    if item == 10:
        raise StopPipeline
    return _jitter(seq, item)


def _fail_in_worker(seq, item):
    if item == 5:
        raise KeyError(f'bad item {item}')
    return item


def _sequential(items, process):
    results = []
    for seq, item in enumerate(items):
        try:
            results.append(process(seq, item))
        except SkipBatch:
            continue
        except StopPipeline:
            break
    return results


@pytest.mark.parametrize('size', [0, 1, 3, 8])
def test_order_preserved_under_random_delays(size):
    with Prefetcher(range(30), _jitter, size) as prefetcher:
        assert list(prefetcher) == [item * 10 for item in range(30)]
    _assert_no_prefetch_threads()


@pytest.mark.parametrize('size', [0, 1, 4])
def test_skip_and_stop_give_sequential_results(size):
    expected = _sequential(range(30), _control_flow)
    assert expected == [0, 20, 30, 40, 60, 70, 80]
    assert list(Prefetcher(range(30), _control_flow, size)) == expected
    _assert_no_prefetch_threads()


def test_one_pool_per_prefetcher_with_requested_workers():
    names = set()

    def record(seq, item):
        names.add(threading.current_thread().name)
        time.sleep(0.002)
        return item

    assert list(Prefetcher(range(40), record, 4, workers=2)) == list(range(40))
    assert 1 <= len(names) <= 2 and all(name.startswith('flowpipe-prefetch') for name in names)


@pytest.mark.parametrize('size', [0, 3])
def test_worker_exception_reraised_with_type_traceback_and_batch(size):
    with pytest.raises(KeyError, match='bad item 5') as info:
        list(Prefetcher(range(20), _fail_in_worker, size))
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert '_fail_in_worker' in frames
    assert any('batch 5' in note for note in info.value.__notes__)
    _assert_no_prefetch_threads()


def test_exception_stops_the_run_promptly():
    started = []

    def process(seq, item):
        started.append(item)
        if item == 3:
            raise RuntimeError('boom')
        time.sleep(0.01)
        return item

    delivered = []
    with pytest.raises(RuntimeError, match='boom'):
        for item in Prefetcher(range(1000), process, 4):
            delivered.append(item)
    assert delivered == [0, 1, 2]
    assert max(started) <= 3 + 4        # nothing started beyond the window in flight when batch 3 failed
    _assert_no_prefetch_threads()


def test_ready_counts_finished_results_and_memory_is_bounded():
    pulled = []

    def items():
        for item in itertools.count():
            pulled.append(item)
            yield item

    prefetcher = Prefetcher(items(), lambda seq, item: item, 4)
    iterator = iter(prefetcher)
    assert prefetcher.ready == 0
    for expected in range(10):
        assert next(iterator) == expected
        deadline = time.monotonic() + WAIT
        while prefetcher.ready < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert prefetcher.ready == 3        # the window minus the result just delivered
        assert len(pulled) <= expected + 4
    prefetcher.close()
    assert prefetcher.ready == 0
    _assert_no_prefetch_threads()


def test_break_early_stops_workers():
    for item in Prefetcher(itertools.count(), _jitter, 4):
        if item >= 50:
            break
    _assert_no_prefetch_threads()


def test_close_is_idempotent_and_works_before_iteration():
    prefetcher = Prefetcher(range(5), _jitter, 2)
    prefetcher.close()
    prefetcher.close()
    assert prefetcher.closed
    assert list(prefetcher) == []
    _assert_no_prefetch_threads()


def test_close_wakes_workers_blocked_on_ordered_locks():
    locks = OrderedLocks()
    blocked = threading.Event()

    def process(seq, item):
        with locks.running(seq):
            if seq == 0:
                blocked.wait(WAIT)          # batch 0 is slow: later batches queue up on the lock
            with locks.hold('train', seq):
                return item

    prefetcher = Prefetcher(range(10), process, 4, on_close=locks.close)
    iterator = iter(prefetcher)
    thread = threading.Thread(target=lambda: (time.sleep(0.1), blocked.set()), daemon=True)
    thread.start()
    assert next(iterator) == 0
    prefetcher.close()                      # batches 1..3 may be waiting on the lock: they must wake up
    thread.join(WAIT)
    assert locks.closed
    _assert_no_prefetch_threads()


def test_garbage_collected_generator_stops_workers():
    def consume():
        for item in Prefetcher(itertools.count(), _jitter, 4):
            yield item

    generator = consume()
    assert next(generator) == 0
    del generator
    gc.collect()
    _assert_no_prefetch_threads()


def test_unreferenced_prefetcher_is_finalized():
    prefetcher = Prefetcher(itertools.count(), _jitter, 3)
    iterator = iter(prefetcher)
    next(iterator)
    del prefetcher, iterator
    gc.collect()
    _assert_no_prefetch_threads()


def test_keyboard_interrupt_in_a_worker_reaches_the_caller():
    def process(seq, item):
        if item == 2:
            raise KeyboardInterrupt
        return item

    with pytest.raises(KeyboardInterrupt) as info:
        list(Prefetcher(itertools.count(), process, 3))
    assert any('batch 2' in note for note in info.value.__notes__)
    _assert_no_prefetch_threads()


def test_keyboard_interrupt_in_the_caller_stops_workers():
    with pytest.raises(KeyboardInterrupt):
        for item in Prefetcher(itertools.count(), _jitter, 3):
            if item == 40:
                raise KeyboardInterrupt
    _assert_no_prefetch_threads()


def test_ctrl_c_while_the_caller_waits_stops_workers():
    release = threading.Event()

    def slow(seq, item):
        release.wait(WAIT)
        return item

    def ctrl_c():
        _thread.interrupt_main()           # what Ctrl-C does to the main thread
        time.sleep(0.3)
        release.set()                       # the batches in flight finish, so close() can join the workers

    interrupter = threading.Timer(0.2, ctrl_c)
    interrupter.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in Prefetcher(itertools.count(), slow, 3):
                pass
    finally:
        release.set()
        interrupter.join(WAIT)
    _assert_no_prefetch_threads()


def test_error_in_the_items_iterator_stops_workers():
    def items():
        yield from range(3)
        raise OSError('disk gone')

    with pytest.raises(OSError, match='disk gone'):
        list(Prefetcher(items(), _jitter, 2))
    _assert_no_prefetch_threads()


def test_iterating_twice_is_refused():
    prefetcher = Prefetcher(range(3), _jitter, 0)
    assert list(prefetcher) == [0, 10, 20]
    with pytest.raises(RuntimeError, match='already been iterated'):
        iter(prefetcher)


@pytest.mark.parametrize('kwargs, error, text', [
    ({'size': -1}, ValueError, 'size=-1'),
    ({'size': 2.5}, ValueError, 'size=2.5'),
    ({'size': 2, 'target': 'gpu'}, ValueError, "target='gpu'"),
    ({'size': 2, 'workers': 0}, ValueError, 'workers=0'),
])
def test_bad_arguments_name_the_problem(kwargs, error, text):
    with pytest.raises(error, match=text):
        Prefetcher(range(3), _jitter, **kwargs)


def test_process_must_be_callable():
    with pytest.raises(TypeError, match='process'):
        Prefetcher(range(3), 'not callable', 2)


def _square_or_fail(seq, item):
    if item == 3:
        raise ValueError(f'cannot square {item}')
    if item == 1:
        raise SkipBatch
    return item * item


def test_process_target_keeps_order_and_errors():
    delivered = []
    with pytest.raises(ValueError, match='cannot square 3') as info:
        for result in Prefetcher(range(6), _square_or_fail, 2, target='processes', workers=1):
            delivered.append(result)
    assert delivered == [0, 4]
    notes = '\n'.join(info.value.__notes__)
    assert '_square_or_fail' in notes and 'batch 3' in notes


class _TwoArgumentError(Exception):
    """Pickles, but does not unpickle: ``args`` holds one value where ``__init__`` needs two."""

    def __init__(self, what, why):
        super().__init__(f'{what}: {why}')


class _Unloadable:
    def __reduce__(self):
        return _refuse_to_load, ()


def _refuse_to_load():
    raise ValueError('this result cannot be rebuilt')


def _fail_unreadably(seq, item):
    if item == 1:
        raise _TwoArgumentError('item 1', 'refused')
    return _Unloadable() if item == 2 else item


@pytest.mark.parametrize('items, error, text', [([0, 1], RuntimeError, '_TwoArgumentError: item 1: refused'),
                                                ([0, 2], ValueError, 'cannot be rebuilt')])
def test_process_target_reports_what_does_not_unpickle(items, error, text):
    delivered = []
    with pytest.raises(error, match=text):
        for result in Prefetcher(items, _fail_unreadably, 2, target='processes', workers=1):
            delivered.append(result)
    assert delivered == [0]
