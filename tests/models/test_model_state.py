"""One list of a model's parts (``TorchModel.parts``, the ``flowpipe.stateful`` contract) for model files and run
checkpoints: both keep every part, and files in the layout written before the list load and continue exactly."""
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import B, Dataset, Pipeline, safe_pickle
from flowpipe.execution import checkpoint as files
from flowpipe.models.torch import TorchModel, io
from flowpipe.models.torch.callbacks import EarlyStopping, ReduceLROnPlateau
from flowpipe.stateful import Attribute, Stateful, load_states, states

pytestmark = pytest.mark.usefixtures('default_dtype')

PARTS = ['network', 'optimizer', 'decay', 'precision', 'iteration', 'skipped_steps', 'callbacks', 'averaging']


def _config(**more):
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    return {'model': network, 'inputs/x/shape': (5,), 'inputs/y/classes': 3, 'loss': 'ce',
            'optimizer': {'name': 'SGD', 'lr': 0.1, 'momentum': 0.9}, 'decay': {'name': 'exp', 'gamma': 0.9},
            'weights_averaging': {'start_iter': 1, 'last_iter': 50, 'frequency': 2},
            'callbacks': [ReduceLROnPlateau(mode='pytorch', patience=1, min_delta=0.0), EarlyStopping(patience=9)],
            'nonfinite_loss': 'skip', **more}


def _batch(seed, nan=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(6, 5))
    if nan:
        x[0, 0] = np.nan
    return {'x': x, 'y': rng.integers(0, 3, 6)}


def _trained(steps=5):
    model = TorchModel(_config())
    for seed in range(steps):
        model.train(**_batch(seed, nan=seed == 2), seed=seed)      # batch 2: a step skipped for its NaN loss
    return model


def _earlier_state(model, tensors=True):
    """The state a model file held before the parts were listed once: each part enumerated by hand."""
    engine = model.engine

    def cpu(value):
        if isinstance(value, torch.Tensor):
            return value.detach().to('cpu', copy=True)
        if isinstance(value, dict):
            return {key: cpu(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(cpu(item) for item in value)
        return value
    return {'network': cpu(engine.state_dict()) if tensors else None,
            'optimizer': cpu(engine.optimizer_state_dict(model.optimizer)) if tensors else None,
            'decay': model.decay.state() if model.decay is not None else None,
            'precision': engine.precision.state(),
            'iteration': model.iteration, 'skipped_steps': model.skipped_steps,
            'callbacks': [(type(callback).__name__, callback.state()) for callback in model.callbacks],
            'averaging': model.averaging.state() if model.averaging is not None else None}


def _earlier_file(model, path):
    """A model file with the contents flowpipe wrote before the parts were listed once (in today's container)."""
    config = dict(model.config)
    config['model'] = None
    with open(path, 'wb') as file:
        safe_pickle.dump(io.for_file({'format': io.FORMAT, 'format_version': 1, 'flowpipe_version': '0.0',
                                      'torch_version': str(torch.__version__), 'model_class': type(model),
                                      'config': config, 'module': io._cpu_copy(model.model),
                                      'state': _earlier_state(model)}), file)


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)        # a NaN loss (the skipped step's) kept in a callback's history


def test_every_part_of_the_model_is_stateful_and_listed_once_in_the_files_order():
    model = _trained()
    parts = model.parts()
    assert list(parts) == PARTS and all(isinstance(part, Stateful) for part in parts.values())
    assert model.skipped_steps == 1 and model.iteration == 5 and model.averaging.iterations


@pytest.mark.parametrize('tensors', [True, False])
def test_a_model_file_keeps_the_layout_files_had_before(tensors):
    model = _trained()
    assert _same(io.payload(model, tensors)['state'], _earlier_state(model, tensors))


def test_a_file_of_the_earlier_layout_loads_every_part_and_training_continues_exactly(tmp_path):
    model = _trained()
    _earlier_file(model, tmp_path / 'earlier.model')
    loaded = TorchModel.from_file(tmp_path / 'earlier.model')
    assert _same(loaded.state(), model.state())
    for seed in (5, 6, 7):
        assert loaded.train(**_batch(seed), seed=seed, fetches='loss') == model.train(**_batch(seed), seed=seed,
                                                                                      fetches='loss')
    assert _same(loaded.state(), model.state())


def test_a_model_saved_and_loaded_through_its_state_continues_exactly():
    model, other = _trained(), _trained(steps=1)
    other.load_state(model.state())
    assert _same(other.state(), model.state())
    assert other.train(**_batch(9), seed=9, fetches='loss') == model.train(**_batch(9), seed=9, fetches='loss')


def test_a_file_without_counters_or_callbacks_starts_them_afresh():
    model, fresh = _trained(), _trained()
    saved = {key: value for key, value in model.state().items() if key not in ('iteration', 'skipped_steps')}
    saved['callbacks'] = None
    for callback in fresh.callbacks:
        callback.load_state({**callback.state(), 'bad_epochs': 7} if 'bad_epochs' in callback.state()
                            else callback.state())
    fresh.load_state(saved)
    assert fresh.iteration == 0 and fresh.skipped_steps == 0
    assert [callback.state() for callback in fresh.callbacks] == [
        callback.state() for callback in TorchModel(_config()).callbacks]


def test_the_contract_leaves_a_part_saved_as_none_as_it_is_and_loads_a_default_where_a_file_has_none():
    class Box:
        value = 3
    box, other = Box(), Box()
    parts = {'value': Attribute(box, 'value', default=0), 'missing': None}
    assert states(parts) == {'value': 3, 'missing': None} and states(parts, ['value'])['value'] is None
    load_states({'value': Attribute(other, 'value')}, {'value': None})
    assert other.value == 3
    load_states(parts, {})
    assert box.value == 0


def _pipeline(n_items=24):
    rng = np.random.default_rng(0)
    data = Dataset(n_items, preloaded={'x': rng.normal(size=(n_items, 5)), 'y': rng.integers(0, 3, n_items)})
    config = {key: value for key, value in _config().items() if key != 'callbacks'}
    return Pipeline().init_model('net', config=config).train_model('net', x=B.x, y=B.y) << data


def test_a_run_checkpoint_whose_models_have_the_earlier_layout_resumes_exactly(tmp_path):
    whole = _pipeline()
    whole.run(4, n_epochs=2, shuffle=True, seed=1)
    first = _pipeline()
    first.run(4, n_iters=3, shuffle=True, seed=1, checkpoint=files.Checkpoint(tmp_path, every=3))
    path = files.latest(str(tmp_path))
    saved = files.read(path)
    earlier = first.m('net')
    saved['models']['net'] = io.for_file({**saved['models']['net'], 'state': _earlier_state(earlier)})
    assert _same(saved['models']['net']['state'], earlier.state())      # the file as it was written before
    with open(path, 'wb') as file:
        safe_pickle.dump(saved, file)
    resumed = _pipeline()
    resumed.run(4, n_epochs=2, shuffle=True, seed=1, checkpoint=files.Checkpoint(tmp_path, every=3), resume=True)
    assert resumed.m('net').iteration == whole.m('net').iteration == 12
    for mine, expected in zip(resumed.m('net').model.parameters(), whole.m('net').model.parameters()):
        torch.testing.assert_close(mine, expected, rtol=0, atol=0)
