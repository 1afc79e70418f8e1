"""Prefetch changes nothing but speed: same losses, parameters and variables as a run without it.

Also the prefetcher's guarantees seen through the public ``Pipeline`` API: errors, early exits, profiling.
"""
import gc
import threading
import time
import traceback

import numpy as np
import pytest
import torch

from flowpipe import B, F, I, R, V, Dataset, ImagesBatch, Pipeline, StopPipeline, action
from flowpipe.models.torch import MLP

# A hang fails the test instead of the suite.

N_ITEMS, BATCH = 48, 8


class NoisyBatch(ImagesBatch):
    """Images with a random per-item augmentation drawn from the per-item generators."""

    @action
    def jitter(self, scale):
        def shift(image, rng):
            return image + rng.normal(0.0, scale, size=image.shape).astype(image.dtype)
        return self.apply_parallel(shift, src='images')


def _dataset():
    rng = np.random.default_rng(0)
    images = rng.random((N_ITEMS, 1, 8, 8), dtype=np.float32)
    return Dataset(N_ITEMS, batch_class=NoisyBatch, num_classes=3,
                   preloaded={'images': images, 'labels': rng.integers(0, 3, N_ITEMS)})


def _augment(pipeline):
    noise = R('normal', 0.0, 0.05, size=B.images.shape)
    return (pipeline
            .flip(p=0.5)
            .jitter(0.02)
            .update(B.images, B.images + noise)
            .update(B.images, F(_sleepy)(B.images, R('uniform', 0.0, 0.01))))


def _sleepy(values, delay):
    """A random per-batch delay, so that prefetched batches finish out of order."""
    time.sleep(delay)
    return values


def _model_pipeline(**placement):
    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': 3, 'initial_block/inputs': 'images',
              **placement}
    template = _augment(Pipeline().init_variable('loss_history', [])
                        .init_model('dynamic', MLP, 'mlp', config=config))
    return template.train_model('mlp', fetches='loss', images=B.images, labels=B.labels,
                                save_to=V('loss_history', mode='a'), use_lock=True)


def _run_model(prefetch, n_epochs=2, **placement):
    torch.manual_seed(0)                   # the model's initial weights
    pipeline = _model_pipeline(**placement) << _dataset()
    pipeline.run(BATCH, shuffle=7, n_epochs=n_epochs, drop_last=True, prefetch=prefetch)
    params = [p.detach().clone() for p in pipeline.m('mlp').model.parameters()]
    return pipeline.v('loss_history'), params


def test_train_model_bit_identical_with_prefetch():
    losses0, params0 = _run_model(0)
    losses4, params4 = _run_model(4)
    assert len(losses0) == 2 * N_ITEMS // BATCH
    assert losses4 == losses0
    assert all(torch.equal(a, b) for a, b in zip(params0, params4))


def test_replicas_and_microbatches_bit_identical_with_prefetch():
    placement = {'device': ['CPU:0', 'CPU:1'], 'microbatch': 3}
    losses0, params0 = _run_model(0, n_epochs=1, **placement)
    losses3, params3 = _run_model(3, n_epochs=1, **placement)
    assert len(losses0) == N_ITEMS // BATCH
    assert losses3 == losses0
    assert all(torch.equal(a, b) for a, b in zip(params0, params3))


class _Tiny:
    """A hand-made torch model updated by a `call` step."""

    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.net = torch.nn.Linear(64, 3)
        with torch.no_grad():
            for param in self.net.parameters():
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1, momentum=0.9)

    def step(self, images, labels, history, seen):
        inputs = torch.as_tensor(images, dtype=torch.float32).reshape(len(images), -1)
        loss = torch.nn.functional.cross_entropy(self.net(inputs), torch.as_tensor(labels))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        history.append(loss.item())
        seen.append(int(images.sum() * 1000))


def _run_tiny(prefetch, stop_at=None):
    tiny = _Tiny()
    history, seen = [], []
    template = Pipeline()
    if stop_at is not None:
        template = template.call(_stop_at, I('c'), stop_at)
    pipeline = (_augment(template)
                .call(tiny.step, B.images, B.labels, history, seen, use_lock=True)) << _dataset()
    pipeline.run(BATCH, shuffle=3, n_epochs=2, prefetch=prefetch)
    return history, seen, [p.detach().clone() for p in tiny.net.parameters()]


def _stop_at(iteration, stop_at):
    if iteration == stop_at:
        raise StopPipeline


@pytest.mark.parametrize('prefetch', [1, 2, 4])
def test_locked_call_updates_in_batch_order(prefetch):
    history0, seen0, params0 = _run_tiny(0)
    history, seen, params = _run_tiny(prefetch)
    assert len(history0) == 2 * N_ITEMS // BATCH
    assert seen == seen0                    # same augmented batches, in the same order
    assert history == history0
    assert all(torch.equal(a, b) for a, b in zip(params0, params))


def test_stop_before_the_locked_step_trains_the_same_batches():
    history0, _, params0 = _run_tiny(0, stop_at=5)
    history4, _, params4 = _run_tiny(4, stop_at=5)
    assert len(history0) == 5
    assert history4 == history0             # prefetched batches 6.. never reach the locked step
    assert all(torch.equal(a, b) for a, b in zip(params0, params4))


def _prefetch_threads():
    return [t for t in threading.enumerate() if t.name.startswith('flowpipe-prefetch')]


def _assert_no_prefetch_threads():
    deadline = time.monotonic() + 120.0
    while _prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _prefetch_threads()


class FailingBatch(NoisyBatch):
    @action
    def explode_at(self, target):
        if self.indices[0] == target:
            raise ZeroDivisionError(f'item {target}')
        return self


def test_worker_error_reaches_the_caller_through_run():
    dataset = Dataset(N_ITEMS, batch_class=FailingBatch, preloaded={'images': np.zeros((N_ITEMS, 1, 2, 2))})
    pipeline = Pipeline().explode_at(24) << dataset
    with pytest.raises(ZeroDivisionError, match='item 24') as info:
        pipeline.run(BATCH, prefetch=3)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert 'explode_at' in frames
    assert any('batch 3' in note for note in info.value.__notes__)
    _assert_no_prefetch_threads()


def test_leaving_gen_batch_early_stops_the_workers():
    pipeline = _augment(Pipeline()) << _dataset()
    for batch in pipeline.gen_batch(BATCH, n_epochs=None, n_iters=1000, prefetch=4):
        if batch.indices[0] >= 16:
            break
    _assert_no_prefetch_threads()
    generator = pipeline.gen_batch(BATCH, n_iters=1000, prefetch=4)
    next(generator)
    del generator
    gc.collect()
    _assert_no_prefetch_threads()


def test_profile_info_after_a_prefetched_run():
    pipeline = _augment(Pipeline()) << _dataset()
    pipeline.run(BATCH, prefetch=2, profile=True)
    info = pipeline.profiler.info
    assert len(info) == 4                   # flip, jitter and the two updates
    assert all(entry['count'] == N_ITEMS // BATCH for entry in info.values())
