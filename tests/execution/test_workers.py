"""``target='processes'``: workers kept by the pipeline, batches through shared memory, nothing left behind."""
import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from flowpipe import B, D, F, P, R, V, Batch, Dataset, action

# A hang fails the test instead of the suite.

ROOT = Path(__file__).resolve().parents[2]


class LoadCounter:
    """Counts, in each process, the copies of it that were unpickled there."""
    loads = 0

    def __init__(self):
        self.made = True

    def __setstate__(self, state):
        type(self).loads += 1
        self.__dict__.update(state)


class DatasetCounter(LoadCounter):
    """A ``LoadCounter`` of its own, for the dataset."""
    loads = 0


def _loads(counter):
    return type(counter).loads


class ImageBatch(Batch):
    """uint8 images made float, with random augmentation; failing on request."""
    components = ('images', 'labels')

    @action
    def to_float(self):
        floats = torch.from_numpy(np.stack(self.noisy)).permute(0, 3, 1, 2)
        self.tensor = floats.contiguous(memory_format=torch.channels_last)
        self.flipped = np.stack(self.noisy)[:, ::-1]
        return self

    @action
    def resize(self, side):
        self.tensor = torch.nn.functional.interpolate(self.tensor, size=(side, side), mode='bilinear')
        return self

    @action
    def fail_at(self, index):
        if index in self.indices:
            raise KeyError(f'no item {index}')
        return self

    @action
    def nap(self, seconds):
        time.sleep(seconds)
        return self


def _jitter(image, amount, rng=None):
    return image.astype(np.float32) / 255 + amount + rng.normal(size=image.shape).astype(np.float32)


def _dataset(size=32, **attributes):
    rng = np.random.default_rng(0)
    return Dataset(size, batch_class=ImageBatch,
                   preloaded={'images': rng.integers(0, 256, (size, 32, 32, 3), dtype=np.uint8),
                              'labels': np.arange(size)}, **attributes)


def _workers():
    """Pids of this process's live flowpipe worker processes."""
    return {child.pid for child in multiprocessing.active_children() if child.name.startswith('flowpipe-worker')}


def _shm():
    return set(os.listdir('/dev/shm'))


def _blocks(names):
    """The shared-memory blocks among the files ``names`` of /dev/shm (semaphores are files there too)."""
    return {name for name in names if not name.startswith('sem.')}


def _semaphores(pipeline):
    """The files in /dev/shm of the semaphores of the pipeline's pool's queues."""
    pool = pipeline.state.workers
    return {f"sem.{lock._semlock.name.lstrip('/')}" for channel in (*pool._tasks, pool._results)
            for lock in (channel._rlock, channel._wlock, channel._sem)}


def _pool_pids(pipeline):
    return {process.pid for process in pipeline.state.workers._processes}


def test_the_pool_outlives_epochs_and_runs_and_each_run_sends_its_runner_once_per_worker():
    pipeline = (_dataset(counter=DatasetCounter()).p.init_variable('offset', 0)
                .update(B('shifted'), B('labels') + V('offset'))
                .update(B('loads'), F(_loads)(V('counter')))
                .update(B('dataset_loads'), F(_loads)(D('counter')))
                .update(B('pid'), F(os.getpid)()))
    pipeline.set_variable('counter', LoadCounter())
    first = list(pipeline.gen_batch(4, n_epochs=2, prefetch=2, workers=2, target='processes'))
    pool = pipeline.state.workers
    pipeline.set_variable('offset', 100)
    second = list(pipeline.gen_batch(4, prefetch=2, workers=2, target='processes'))
    assert pipeline.state.workers is pool and _workers() >= _pool_pids(pipeline)
    assert {batch.pid for batch in first + second} <= _pool_pids(pipeline)
    # each worker unpickled the runner once per run, whatever number of batches it processed
    assert [batch.loads for batch in first] == [1] * 16 and [batch.loads for batch in second] == [2] * 8
    # the dataset, part of the pipeline's definition, only once for the pool's life
    assert {batch.dataset_loads for batch in first + second} == {1}
    assert [batch.shifted.tolist() for batch in second[:2]] == [[100, 101, 102, 103], [104, 105, 106, 107]]
    pipeline.reset('iter')
    assert pipeline.state.workers is None and not _workers() & _pool_pids_of(pool)


def _pool_pids_of(pool):
    return {process.pid for process in pool._processes}


def _augmented():
    return (_dataset().p.apply_parallel(_jitter, src='images', dst='noisy', amount=P(R('integers', 0, 10)))
            .to_float().update(B('labels'), B('labels') * R('integers', 1, 5)))


@pytest.fixture
def two_torch_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


def test_processes_give_the_batches_of_threads_and_of_no_prefetch_bit_for_bit_and_layout_for_layout(
        two_torch_threads):
    pipeline = _augmented()
    runs = [list(pipeline.gen_batch(8, shuffle=True, seed=3, prefetch=prefetch, target=target))
            for prefetch, target in [(2, 'processes'), (2, 'threads'), (0, 'threads')]]
    # interpolate's bits depend on the number of torch threads: the workers run with the caller's
    resized = pipeline.resize(96)
    in_processes, inline = (list(resized.gen_batch(8, seed=3, prefetch=prefetch, target=target))
                            for prefetch, target in [(2, 'processes'), (0, 'threads')])
    assert all(torch.equal(a.tensor, b.tensor) for a, b in zip(in_processes, inline))
    for got, threads, inline in zip(*runs):
        for name in ('noisy', 'tensor', 'flipped', 'labels'):
            value, expected = getattr(got, name), getattr(threads, name)
            assert type(value) is type(expected) and value.dtype == expected.dtype
            if isinstance(expected, torch.Tensor):
                assert value.stride() == expected.stride() and torch.equal(value, expected)
                assert torch.equal(value, getattr(inline, name))
            else:
                assert value.strides == expected.strides and np.array_equal(value, expected)
                assert np.array_equal(value, getattr(inline, name))
        assert got.tensor.is_contiguous(memory_format=torch.channels_last) and got.flipped.strides[1] < 0
        assert got.tensor.untyped_storage().is_shared() and got.dataset is pipeline.dataset


def test_an_error_in_a_worker_raises_in_the_caller_with_its_type_action_and_batch():
    pipeline = _dataset().p.fail_at(13)
    with pytest.raises(KeyError, match='no item 13') as info:
        pipeline.run(4, prefetch=2, target='processes')
    notes = '\n'.join(info.value.__notes__)
    assert 'fail_at(13)' in notes and 'batch 3' in notes and 'Traceback in the worker process' in notes
    pipeline.run(4, n_iters=3, prefetch=2, target='processes')     # the pool goes on serving the pipeline


def test_a_runner_that_does_not_pickle_names_the_fix_and_leaves_the_pool_free_for_the_next_run():
    pipeline = _dataset().p.init_variable('extra', 0).update(B('more'), B('labels') + V('extra'))
    pipeline.run(4, n_iters=1, prefetch=2, target='processes')
    pipeline.set_variable('extra', (value for value in range(3)))      # a generator does not pickle
    with pytest.raises(TypeError, match='generator') as info:
        pipeline.run(4, prefetch=2, target='processes')
    assert "use target='threads'" in '\n'.join(info.value.__notes__)
    pool = pipeline.state.workers
    pipeline.set_variable('extra', 5)
    assert next(pipeline.gen_batch(4, prefetch=2, target='processes')).more.tolist() == [5, 6, 7, 8]
    assert pipeline.state.workers is pool and not pool.in_use


def _exit(code):
    if code:
        os._exit(code)


def test_a_worker_that_dies_fails_the_run_instead_of_hanging_and_the_next_run_has_new_workers():
    pipeline = _dataset().p.init_variable('code', 3).call(_exit, V('code')).update(B('double'), B('labels') * 2)
    with pytest.raises(RuntimeError, match='exited with code 3'):
        pipeline.run(4, prefetch=2, target='processes')
    dead = pipeline.state.workers
    assert dead.closed
    pipeline.set_variable('code', 0)
    batches = list(pipeline.gen_batch(16, prefetch=1, target='processes'))
    assert batches[1].double.tolist()[:2] == [32, 34] and not pipeline.state.workers.closed


def _finished(pipeline):
    pipeline.run(4, prefetch=2, target='processes')


def _left(pipeline):
    for _ in pipeline.gen_batch(4, prefetch=2, target='processes'):
        break


def _failed(pipeline):
    pipeline.set_variable('bad', 9)
    with pytest.raises(KeyError):
        pipeline.run(4, prefetch=2, target='processes')


@pytest.mark.parametrize('end', [_finished, _left, _failed])
def test_a_run_leaves_only_the_pipelines_pool_which_goes_with_the_pipeline(end):
    gc.collect()
    before, shm = _workers(), _shm()
    pipeline = _augmented().nap(0.05).init_variable('bad', -1).fail_at(V('bad'))
    end(pipeline)
    pool, semaphores = _pool_pids(pipeline), _semaphores(pipeline)
    assert _workers() - before == pool and len(pool) == 2
    assert not _blocks(_shm() - shm) and semaphores <= _shm()
    del pipeline
    gc.collect()
    assert not _workers() - before and not _blocks(_shm() - shm) and not semaphores & _shm()
    assert not any(Path(f'/proc/{pid}').exists() for pid in pool)


def test_ctrl_c_in_the_caller_stops_the_workers_and_the_pipeline_runs_again():
    gc.collect()
    before, shm = _workers(), _shm()
    pipeline = _augmented().nap(0.3)
    pipeline.run(4, n_iters=1, prefetch=2, target='processes')     # the workers are up: the signal finds a run
    semaphores = _semaphores(pipeline)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            pipeline.run(4, n_epochs=5, prefetch=2, target='processes')
    finally:
        timer.join()
    assert not _workers() - before and not _blocks(_shm() - shm) and not semaphores & _shm()
    pipeline.run(4, n_iters=2, prefetch=2, target='processes')
    del pipeline
    gc.collect()
    assert not _workers() - before


def test_two_runs_of_one_pipeline_at_once_each_get_their_batches():
    pipeline = _dataset().p.update(B('double'), B('labels') * 2)
    first = pipeline.gen_batch(4, prefetch=2, target='processes')
    second = pipeline.gen_batch(4, prefetch=2, target='processes')
    pairs = list(zip(first, second))
    assert [(a.double.tolist(), b.double.tolist()) for a, b in pairs][:2] == [([0, 2, 4, 6], [0, 2, 4, 6]),
                                                                              ([8, 10, 12, 14], [8, 10, 12, 14])]
    assert len(pairs) == 8


def test_workers_sets_the_number_of_processes_independently_of_prefetch():
    pipeline = _dataset().p.update(B('pid'), F(os.getpid)())
    batches = list(pipeline.gen_batch(4, prefetch=4, workers=1, target='processes'))
    assert len(_pool_pids(pipeline)) == 1 and {batch.pid for batch in batches} == _pool_pids(pipeline)


@pytest.mark.slow     # a fresh interpreter and its workers: in CI or with FLOWPIPE_SLOW=1
def test_a_script_without_a_main_guard_runs_once_and_ships_its_own_classes_and_functions(tmp_path):
    script = tmp_path / 'train.py'
    script.write_text(textwrap.dedent('''
        import numpy as np
        from flowpipe import B, F, Batch, Dataset, action

        print('body', flush=True)

        def double(x):
            return x * 2

        class Local(Batch):
            components = ('x',)

            @action
            def square(self):
                self.x = self.x ** 2
                return self

        dataset = Dataset(6, batch_class=Local, preloaded={'x': np.arange(6)})
        batches = list(dataset.p.square().update(B('y'), F(double)(B('x'))).gen_batch(3, prefetch=2,
                                                                                      target='processes'))
        assert all(type(batch) is Local for batch in batches)
        print([batch.y.tolist() for batch in batches])
    '''))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=900,
                          env={**os.environ, 'PYTHONPATH': str(ROOT)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split('\n') == ['body', '[[0, 2, 8], [18, 32, 50]]', '']
