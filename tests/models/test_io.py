"""save/load: exact continuation, any device layout to any other, atomic writes, clear errors for bad files."""
import os
import pickle

import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import safe_pickle
from flowpipe.errors import ModelFileError, UnsafeFileError
from flowpipe.models.torch import MLP, SimpleCNN, TorchModel
from flowpipe.models.torch import io
from flowpipe.parallel import ENGINES
from flowpipe.parallel.engines import SingleEngine

CONFIG = {'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 4, 'initial_block/inputs': 'images',
          'body/filters': (4, 8), 'decay': {'name': 'exp', 'gamma': 0.9}}


def _batch(seed):
    rng = np.random.default_rng(seed)
    return {'images': rng.normal(size=(10, 1, 8, 8)).astype('float32'), 'labels': rng.integers(0, 4, 10)}


def _trained(**overrides):
    torch.manual_seed(0)
    model = SimpleCNN({**CONFIG, **overrides})
    for seed in range(3):
        model.train(**_batch(seed))
    return model


def test_training_continues_exactly_after_a_round_trip(tmp_path):
    model = _trained()
    model.save(tmp_path / 'model.pkl')
    expected = model.train(**_batch(3), fetches='loss')
    loaded = SimpleCNN.from_file(tmp_path / 'model.pkl')
    assert loaded.iteration == 3
    assert loaded.train(**_batch(3), fetches='loss') == expected
    assert loaded.optimizer.param_groups[0]['lr'] == model.optimizer.param_groups[0]['lr']


def test_load_into_an_existing_model_replaces_its_state(tmp_path):
    model = _trained()
    model.save(tmp_path / 'model.pkl')
    torch.manual_seed(1)
    other = SimpleCNN(CONFIG).load(tmp_path / 'model.pkl')
    np.testing.assert_array_equal(other.predict(**_batch(5)), model.predict(**_batch(5)))


def test_replicas_to_one_device_and_back(tmp_path):
    model = _trained(device=['CPU:0', 'CPU:1'], microbatch=4, batch_norm=False)  # per-shard BN stats differ
    model.save(tmp_path / 'multi.pkl')
    single = TorchModel.from_file(tmp_path / 'multi.pkl', device='cpu', microbatch=None)
    assert type(single) is SimpleCNN and single.plan.num_replicas == 1
    np.testing.assert_allclose(single.predict(**_batch(5)), model.predict(**_batch(5)), rtol=1e-5, atol=1e-6)
    single.save(tmp_path / 'single.pkl')
    again = SimpleCNN.from_file(tmp_path / 'single.pkl', device=['CPU:0', 'CPU:1'])
    assert again.plan.num_replicas == 2
    assert again.train(**_batch(6), fetches='loss') == pytest.approx(single.train(**_batch(6), fetches='loss'),
                                                                      rel=1e-5)
    model.close()
    again.close()


def test_a_ready_module_is_stored_with_the_file(tmp_path):
    torch.manual_seed(0)
    model = TorchModel({'model': nn.Linear(3, 2), 'loss': 'ce'})
    model.train(np.ones((4, 3), 'float32'), np.array([0, 1, 0, 1]))
    model.save(tmp_path / 'linear.pkl')
    loaded = TorchModel.from_file(tmp_path / 'linear.pkl')
    assert loaded.model is not model.model
    torch.testing.assert_close(loaded.model.weight, model.model.weight)


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    model = _trained()
    path = tmp_path / 'model.pkl'
    model.save(path)
    original = path.read_bytes()

    def broken_dump(obj, file, *args):
        file.write(b'half a file')
        raise OSError('disk full')
    monkeypatch.setattr(safe_pickle, 'dump', broken_dump)
    with pytest.raises(OSError, match='disk full'):
        model.save(path)
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ['model.pkl']


def test_corrupt_file(tmp_path):
    model = _trained()
    model.save(tmp_path / 'model.pkl')
    data = (tmp_path / 'model.pkl').read_bytes()
    (tmp_path / 'cut.pkl').write_bytes(data[:len(data) // 2])
    with pytest.raises(ModelFileError, match='corrupt'):
        SimpleCNN.from_file(tmp_path / 'cut.pkl')


def test_foreign_file(tmp_path):
    torch.save({'weights': [1, 2]}, tmp_path / 'other.pt')
    with pytest.raises(ModelFileError, match='not written by TorchModel.save'):
        model = _trained()
        model.load(tmp_path / 'other.pt')
    (tmp_path / 'other.pkl').write_bytes(pickle.dumps({'weights': [1, 2]}))
    with pytest.raises(UnsafeFileError, match='bare pickle format.*only a trusted reader opens'):
        model.load(tmp_path / 'other.pkl')
    with pytest.raises(ModelFileError, match='not written by TorchModel.save'):
        model.load(tmp_path / 'other.pkl', trusted=True)


def test_newer_format_version(tmp_path, monkeypatch):
    model = _trained()
    monkeypatch.setattr(io, 'FORMAT_VERSION', io.FORMAT_VERSION + 1)
    model.save(tmp_path / 'future.pkl')
    monkeypatch.undo()
    with pytest.raises(ModelFileError, match=r'format version 2.*Upgrade flowpipe'):
        SimpleCNN.from_file(tmp_path / 'future.pkl')


def test_different_network_and_missing_file(tmp_path):
    _trained().save(tmp_path / 'cnn.pkl')
    mlp = MLP({**CONFIG, 'decay': None, 'body/filters': None})       # an MLP has no filters
    with pytest.raises(ModelFileError, match='same network'):
        mlp.load(tmp_path / 'cnn.pkl')
    with pytest.raises(FileNotFoundError, match='does not exist'):
        mlp.load(tmp_path / 'nothing.pkl')


def test_the_precision_state_travels_with_the_file(tmp_path):
    from flowpipe.parallel import MixedPrecision, Precision
    model = _trained()
    model.save(tmp_path / 'full.pkl')
    assert io.read(tmp_path / 'full.pkl')['state']['precision'] == {}
    model.engine.precision = MixedPrecision(torch.device('cpu'))   # CPU float16 autocast: the scaler's state
    model.train(**_batch(4))
    model.save(tmp_path / 'mixed.pkl')
    saved = io.read(tmp_path / 'mixed.pkl')['state']['precision']
    assert saved == model.engine.precision.state() and saved['scaler']['_growth_tracker'] == 1
    other = SimpleCNN(CONFIG)
    other.engine.precision = MixedPrecision(torch.device('cpu'))
    other.load(tmp_path / 'mixed.pkl')
    assert other.engine.precision.state() == saved
    assert type(SimpleCNN.from_file(tmp_path / 'mixed.pkl').engine.precision) is Precision   # full precision here


def test_a_file_without_precision_state_still_loads(tmp_path):
    model = _trained()
    payload = io.payload(model)
    del payload['state']['precision']                   # as written before the precision state was saved
    (tmp_path / 'old.pkl').write_bytes(safe_pickle.dumps(io.for_file(payload)))
    loaded = SimpleCNN.from_file(tmp_path / 'old.pkl')
    np.testing.assert_array_equal(loaded.predict(**_batch(5)), model.predict(**_batch(5)))


class PrefixingEngine(SingleEngine):
    """Gives the network's and the optimizer's state in a form of its own (as a sharded engine gathers them)
    and takes back only that form: a file round-trips only when io goes through the engine both ways."""

    def state_dict(self):
        return {f'spy.{key}': value for key, value in super().state_dict().items()}

    def load_state_dict(self, state):
        assert all(key.startswith('spy.') for key in state), list(state)
        super().load_state_dict({key[len('spy.'):]: value for key, value in state.items()})

    def optimizer_state_dict(self, optimizer):
        return {'spy': super().optimizer_state_dict(optimizer)}

    def load_optimizer_state_dict(self, optimizer, state):
        super().load_optimizer_state_dict(optimizer, state['spy'])


def test_saving_and_loading_go_through_the_engines_state_dicts(tmp_path, monkeypatch):
    monkeypatch.setitem(ENGINES, 'single', PrefixingEngine)
    model = _trained()
    assert type(model.engine) is PrefixingEngine
    model.save(tmp_path / 'model.pkl')
    state = io.read(tmp_path / 'model.pkl')['state']
    assert list(state['network']) == [f'spy.{key}' for key in model.model.state_dict()]
    assert list(state['optimizer']) == ['spy'] and state['optimizer']['spy']['state']
    expected = model.train(**_batch(3), fetches='loss')
    loaded = SimpleCNN.from_file(tmp_path / 'model.pkl')
    assert loaded.train(**_batch(3), fetches='loss') == expected            # weights and Adam's moments came back
    torch.manual_seed(1)
    other = SimpleCNN(CONFIG).load(tmp_path / 'model.pkl')
    np.testing.assert_array_equal(other.predict(**_batch(5)), SimpleCNN.from_file(tmp_path / 'model.pkl').predict(
        **_batch(5)))
