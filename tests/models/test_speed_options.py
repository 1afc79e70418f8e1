"""A model's speed keys (memory_format, amp, compile, pin_memory) through the config, pipelines and model files."""
import numpy as np
import pytest
import torch

from flowpipe import B, Dataset, Pipeline
from flowpipe.batch import ImagesBatch
from flowpipe.models.torch import SimpleCNN, TorchModel
from flowpipe.opensets import Digits

SHAPE = (1, 8, 8)


def cnn(**overrides):
    torch.manual_seed(0)
    config = {'inputs/images/shape': SHAPE, 'inputs/labels/classes': 10, 'device': 'cpu', 'body/filters': (4, 8),
              'optimizer': {'name': 'SGD', 'lr': 0.1}, 'batch_norm': False}
    return SimpleCNN(config, **overrides)


def digits(n=24):
    whole = Digits().train.next_batch(n, n_epochs=1)
    images = np.moveaxis(np.asarray(whole.images, dtype=np.float64), -1, 1) / 16
    return images, np.asarray(whole.labels)


def losses(model, steps=3):
    images, labels = digits()
    return [model.train(images=images, labels=labels, fetches='loss') for _ in range(steps)]


@pytest.mark.parametrize('overrides', [{}, {'device': ['CPU:0', 'CPU:1'], 'microbatch': 5}])
def test_channels_last_model_gives_the_default_losses_in_float64(overrides):
    expected = losses(cnn(dtype='float64', **overrides))
    model = cnn(dtype='float64', memory_format='channels_last', **overrides)
    assert model.engine.memory_format is torch.channels_last
    assert losses(model) == pytest.approx(expected, rel=1e-10)
    assert 'memory format: channels_last' in repr(model)


@pytest.mark.parametrize('overrides', [{}, {'device': ['CPU:0', 'CPU:1'], 'microbatch': 5}])
def test_torchs_fused_adam_through_the_optimizer_config_gives_the_loop_adams_losses(overrides):
    expected = losses(cnn(dtype='float64', optimizer={'name': 'Adam', 'lr': 0.01, 'foreach': False}, **overrides))
    model = cnn(dtype='float64', optimizer={'name': 'Adam', 'lr': 0.01, 'fused': True}, **overrides)
    assert model.optimizer.defaults['fused'] is True
    assert losses(model) == pytest.approx(expected, rel=1e-10)


def test_cpu_amp_model_trains_in_bfloat16_close_to_float32():
    expected = losses(cnn())
    model = cnn(amp=True)
    got = losses(model)
    assert got == pytest.approx(expected, rel=3e-2) and got != expected
    assert 'bfloat16 autocast' in repr(model)
    labels, proba = model.predict(images=digits()[0], fetches=['labels', 'proba'])
    assert proba.dtype == np.float32 and labels.shape == (24,)


def test_speed_keys_are_known_config_keys():
    with pytest.raises(ValueError, match="Did you mean \\['memory_format'\\]"):
        cnn(memory_fromat='channels_last')
    with pytest.raises(ValueError, match="memory_format as 'channels_last'"):
        cnn(memory_format='nhwc')
    with pytest.raises(ValueError, match='CUDA device for pin_memory=True'):
        cnn(pin_memory=True)


def test_a_channels_last_model_file_loads_into_a_default_model(tmp_path):
    model = cnn(memory_format='channels_last')
    losses(model, steps=1)
    model.save(tmp_path / 'net.pkl')
    loaded = TorchModel.from_file(tmp_path / 'net.pkl', memory_format=None)
    images, labels = digits()
    assert loaded.predict(images=images, fetches='loss', labels=labels) == pytest.approx(
        model.predict(images=images, fetches='loss', labels=labels), rel=1e-5)
    assert loaded.engine.memory_format is None


def test_a_pipeline_hands_channels_last_arrays_to_a_channels_last_model_without_a_copy():
    generator = np.random.default_rng(0)
    dataset = Dataset(32, batch_class=ImagesBatch, preloaded={
        'images': generator.integers(0, 256, (32, 10, 10, 3), dtype=np.uint8),
        'labels': generator.integers(0, 10, 32)})
    model = cnn(memory_format='channels_last', **{'inputs/images/shape': (3, 8, 8)})
    arrays, seen = [], []
    model.model.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    pipeline = (Pipeline().import_model('net', model).resize((8, 8))
                .to_array(memory_format='channels_last')
                .call(lambda batch: arrays.append(batch.images), B())
                .train_model('net', images=B.images, labels=B.labels)) << dataset
    pipeline.run(16, n_iters=2)
    assert len(seen) == 2
    for array, tensor in zip(arrays, seen):
        assert tensor.is_contiguous(memory_format=torch.channels_last) and not tensor.is_contiguous()
        assert tensor.data_ptr() == array.__array_interface__['data'][0]      # the batch's own memory
