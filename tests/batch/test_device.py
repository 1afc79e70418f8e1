"""Batch.to_device: components as tensors on a device, moved ahead of the model step under prefetch."""
import numpy as np
import pytest
import torch

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.batch import ImagesBatch
from flowpipe.batch.device import to_device
from flowpipe.models.torch import SimpleCNN


def dataset(n=40):
    generator = np.random.default_rng(0)
    return Dataset(n, batch_class=ImagesBatch, preloaded={
        'images': generator.integers(0, 256, (n, 8, 8, 3), dtype=np.uint8),
        'labels': generator.integers(0, 10, n)})


def test_components_become_tensors_sharing_memory_on_the_cpu():
    batch = dataset().next_batch(8).to_array(memory_format='channels_last')
    images = batch.images
    batch.to_device('cpu')
    assert isinstance(batch.images, torch.Tensor) and isinstance(batch.labels, torch.Tensor)
    assert batch.images.data_ptr() == images.__array_interface__['data'][0]
    assert batch.images.is_contiguous(memory_format=torch.channels_last) and batch.labels.dtype == torch.int64
    assert batch.image_shape == (3, 8, 8)
    assert torch.equal(batch.flip().flip().images, torch.from_numpy(images))    # image actions keep tensors


def test_only_the_named_components_move_and_bad_ones_are_named():
    batch = dataset().next_batch(4).to_array()
    batch.to_device('CPU:1', src='labels')
    assert isinstance(batch.labels, torch.Tensor) and isinstance(batch.images, np.ndarray)
    with pytest.raises(ValueError, match="components holding one numeric array or tensor. Received: {'masks'"):
        batch.to_device('cpu', src='masks')
    ragged = dataset().next_batch(2)
    ragged.images = np.array([np.zeros((2, 2, 3)), np.zeros((3, 3, 3))], dtype=object)
    with pytest.raises(ValueError, match='to_array'):
        ragged.to_device('cpu', src='images')
    with pytest.raises(ValueError, match='one device for to_device'):
        batch.to_device(['CPU:0', 'CPU:1'])
    with pytest.raises(ValueError, match="pin_memory as True, False or 'auto'"):
        batch.to_device('cpu', pin_memory='yes')


def test_read_only_arrays_are_copied_not_shared():
    array = np.arange(6.0)
    array.flags.writeable = False
    moved = to_device({'x': array}, torch.device('cpu'), pin_memory=False)['x']
    assert moved.tolist() == array.tolist() and moved.data_ptr() != array.__array_interface__['data'][0]
    reversed_view = np.arange(6.0)[::-1]                  # a negative stride, which torch cannot share
    assert to_device({'x': reversed_view}, torch.device('cpu'), pin_memory=False)['x'].tolist() == [5, 4, 3, 2, 1, 0]


def test_a_model_takes_arrays_with_negative_strides():
    torch.manual_seed(0)
    model = SimpleCNN({'inputs/images/shape': (3, 8, 8), 'inputs/labels/classes': 10, 'body/filters': (4,)})
    images = np.random.default_rng(0).random((4, 3, 8, 8), dtype=np.float32)
    labels = np.arange(4)
    flipped = model.predict(images=images[:, :, :, ::-1])
    assert np.allclose(flipped, model.predict(images=np.ascontiguousarray(images[:, :, :, ::-1])))
    assert np.isfinite(model.train(images=images[::-1], labels=labels[::-1], fetches='loss'))


def train_losses(prefetch, with_device):
    torch.manual_seed(0)
    model = SimpleCNN({'inputs/images/shape': (3, 8, 8), 'inputs/labels/classes': 10, 'body/filters': (4,),
                       'memory_format': 'channels_last'})
    seen = {'given': [], 'used': []}
    model.model.register_forward_pre_hook(lambda module, args: seen['used'].append(args[0]))
    pipeline = Pipeline().init_variable('loss', []).import_model('net', model).to_array(memory_format='channels_last')
    if with_device:
        pipeline = pipeline.to_device('cpu')
    pipeline = (pipeline.call(lambda batch: seen['given'].append(batch.images), B())
                .train_model('net', images=B.images, labels=B.labels, fetches='loss', save_to=V('loss', mode='a')))
    pipeline = pipeline << dataset()
    pipeline.run(8, n_epochs=2, shuffle=3, prefetch=prefetch)
    return pipeline.v('loss'), seen


def test_a_prefetching_run_with_to_device_trains_as_one_without_it():
    expected, _ = train_losses(0, False)
    losses, seen = train_losses(3, True)
    assert losses == expected and len(losses) == 10
    # the model computes on the very tensors the action made: no copy in the step (all are kept alive in `seen`)
    assert {t.data_ptr() for t in seen['used']} == {t.data_ptr() for t in seen['given']}
    assert len(seen['used']) == 10


@pytest.mark.gpu
def test_to_device_on_a_gpu_copies_through_pinned_memory_and_trains_the_same():
    batch = dataset().next_batch(8).to_array()
    expected = batch.images.copy()
    batch.to_device('GPU:0')
    assert batch.images.device.type == 'cuda' and np.array_equal(batch.images.cpu().numpy(), expected)
    torch.manual_seed(0)
    losses = {}
    for with_device in (False, True):
        torch.manual_seed(0)
        model = SimpleCNN({'inputs/images/shape': (3, 8, 8), 'inputs/labels/classes': 10, 'device': 'GPU:0'})
        pipeline = Pipeline().init_variable('loss', []).import_model('net', model).to_array()
        pipeline = pipeline.to_device('GPU:0') if with_device else pipeline
        pipeline = pipeline.train_model('net', images=B.images, labels=B.labels, fetches='loss',
                                        save_to=V('loss', mode='a')) << dataset()
        pipeline.run(8, n_epochs=2, shuffle=3, prefetch=3)
        losses[with_device] = pipeline.v('loss')
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)
