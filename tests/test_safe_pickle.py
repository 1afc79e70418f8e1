"""flowpipe.safe_pickle: model files, export metadata and checkpoints are read without running the code a file
names; flowpipe's own files (its networks, a ready network of torch.nn layers, callbacks, averaging, schedules,
numpy and tensor variables) read safely, anything else needs ``trusted=True``."""
import os

import dill
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import B, Checkpoint, Dataset, I, Pipeline, UnsafeFileError, V
from flowpipe.models.torch.callbacks import ReduceLROnPlateau
from flowpipe.models.torch import MLP, TorchModel
from flowpipe.safe_pickle import allowed_names

pytestmark = pytest.mark.usefixtures('default_dtype')

X, Y = np.random.default_rng(0).normal(size=(12, 4)), np.arange(12) % 3


def touch(path):
    """Stands for the code a hostile file runs: it leaves a mark."""
    open(path, 'w').close()
    return {'format': 'flowpipe-model'}


class Marking:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return touch, (self.path,)


class OwnNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x):
        return self.linear(x)


def _config(**more):
    return {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (8,), **more}


@pytest.mark.parametrize('path_as', ['from_file', 'load', 'load_model'])
def test_a_file_naming_code_is_refused_before_the_code_runs_and_trusted_runs_it(tmp_path, path_as):
    hostile, mark = tmp_path / 'hostile.model', tmp_path / 'mark'
    with open(hostile, 'wb') as file:
        dill.dump(Marking(str(mark)), file)
    open_it = {'from_file': lambda **kw: TorchModel.from_file(hostile, **kw),
               'load': lambda **kw: MLP(_config()).load(hostile, **kw),
               'load_model': lambda **kw: Pipeline().load_model_now('net', path=hostile, **kw)}[path_as]
    with pytest.raises(UnsafeFileError, match=r"Expected a model file that loads without running code\. Received: "
                                              r".*hostile\.model.*tests\.test_safe_pickle\.touch.*trusted=True"):
        open_it()
    assert not mark.exists()
    with pytest.raises(Exception):      # trusted: dill runs the file's code (which returns no model here)
        open_it(trusted=True)
    assert mark.exists()


def test_flowpipe_s_own_files_load_without_trusted(tmp_path):
    torch.manual_seed(0)
    model = MLP(_config(decay={'name': 'exp', 'gamma': 0.9}, callbacks=[ReduceLROnPlateau()],
                        weights_averaging={'start_iter': 0, 'last_iter': 10, 'frequency': 1, 'avg_fn': 'ema',
                                           'ema_decay': 0.5},
                        optimizer={'name': 'SGD', 'lr': 0.1, 'momentum': 0.9}))
    model.train(X, Y)
    ready = TorchModel({'model': nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)), 'loss': 'ce'})
    ready.train(X, Y)
    for name, saved in (('mlp', model), ('ready', ready)):
        saved.save(tmp_path / name)
        loaded = type(saved).from_file(tmp_path / name)
        assert loaded.iteration == saved.iteration
        np.testing.assert_array_equal(loaded.predict(X), saved.predict(X))
    model.save(tmp_path / 'meta.pkl', fmt='safetensors')                   # an export's metadata file
    np.testing.assert_array_equal(MLP.from_file(tmp_path / 'meta.pkl').predict(X), model.predict(X))
    model.save(tmp_path / 'program.pkl', fmt='torchscript')                # a program beside it: trusted only
    with pytest.raises(UnsafeFileError, match=r"a torchscript file: a program.*trusted=True"):
        MLP.from_file(tmp_path / 'program.pkl')
    np.testing.assert_array_equal(MLP.from_file(tmp_path / 'program.pkl', trusted=True).predict(X), model.predict(X))


@pytest.mark.parametrize('config, named', [
    ({'model': OwnNet(), 'loss': 'ce'}, 'tests.test_safe_pickle.OwnNet'),
    (_config(loss=lambda outputs, targets: outputs.sum()), 'code stored in the file itself')])
def test_a_network_or_loss_of_the_user_s_code_needs_trusted(tmp_path, config, named):
    torch.manual_seed(0)
    model = (TorchModel if 'model' in config else MLP)(config)
    model.save(tmp_path / 'own.model')
    with pytest.raises(UnsafeFileError, match='trusted=True') as info:
        type(model).from_file(tmp_path / 'own.model')
    assert named in str(info.value)
    again = type(model).from_file(tmp_path / 'own.model', trusted=True)
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


CRASH = {'at': None}


class Crash(Exception):
    pass


def crash(number):
    if number == CRASH['at']:
        raise Crash(f'crashed at batch {number}')


def _crashed(pipeline, checkpoint):
    """Run 2 epochs of 3 batches, crashing at the 5th: the checkpoint holds 4 batches."""
    CRASH['at'] = 4
    try:
        with pytest.raises(Crash):
            pipeline.run(4, n_epochs=2, seed=1, checkpoint=checkpoint)
    finally:
        CRASH['at'] = None


class Tally:
    """A variable of the user's own class, kept in the checkpoints."""

    def __init__(self):
        self.seen = 0


def _counting(folder, trusted):
    dataset = Dataset(12, preloaded={'x': X, 'y': Y})
    pipeline = (Pipeline()
                .init_variable('tally', Tally())
                .init_variable('arrays', [])
                .init_model('net', MLP, config=_config())
                .call(crash, I('c'))
                .call(lambda batch, tally: setattr(tally, 'seen', tally.seen + len(batch)), B(), V('tally'))
                .update(V('arrays', mode='a'), B.x)
                .train_model('net', x=B.x, y=B.y)) << dataset
    return pipeline, Checkpoint(folder, trusted=trusted)


def test_a_checkpoint_holding_the_user_s_objects_resumes_only_when_trusted(tmp_path):
    pipeline, checkpoint = _counting(tmp_path / 'ckpt', False)
    _crashed(pipeline, checkpoint)
    with pytest.raises(UnsafeFileError, match=r"Expected a checkpoint that loads without running code.*"
                                              r"tests\.test_safe_pickle\.Tally.*Checkpoint\(folder, trusted=True\)"):
        _counting(tmp_path / 'ckpt', False)[0].run(4, n_epochs=2, seed=1, checkpoint=checkpoint, resume=True)
    resumed, trusted = _counting(tmp_path / 'ckpt', True)
    resumed.run(4, n_epochs=2, seed=1, checkpoint=trusted, resume=True)
    assert resumed.v('tally').seen == 24 and len(resumed.v('arrays')) == 6


def test_a_checkpoint_of_arrays_tensors_and_flowpipe_models_resumes_safely(tmp_path):
    dataset = Dataset(12, preloaded={'x': X, 'y': Y})
    pipeline = (Pipeline()
                .init_variable('arrays', [])
                .init_variable('losses', [])
                .init_model('net', MLP, config=_config())
                .call(crash, I('c'))
                .update(V('arrays', mode='a'), B.x)
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << dataset
    _crashed(pipeline, tmp_path / 'ckpt')
    again = pipeline.run(4, n_epochs=2, seed=1, checkpoint=tmp_path / 'ckpt', resume=True)
    assert len(again.v('arrays')) == 6 and len(again.v('losses')) == 6


@pytest.mark.parametrize('name', ['os.system', 'builtins.eval', 'builtins.getattr', 'builtins.setattr',
                                  'builtins.__import__', 'torch.load', 'torch.nn.functional.torch',
                                  'torch.nn.functional.__builtins__', 'numpy.dtypes.__builtins__',
                                  'torch.fx.graph_module._forward_from_src', 'flowpipe.parallel.launch',
                                  'dill._dill._create_function', '__main__.Net', 'flowpipe.callbacks.CSVLogger',
                                  'numpy.load', 'torch.nn.parallel.distributed.DistributedDataParallel',
                                  'flowpipe.models.torch.ready.SimpleCNN', 'torch.storage._load_from_bytes'])
def test_the_safe_reader_refuses_code(name):
    assert name not in allowed_names()


@pytest.mark.parametrize('name', ['torch._utils._rebuild_tensor_v2', 'torch.float64', 'torch.nn.modules.linear.Linear',
                                  'collections.OrderedDict', 'torch.nn.functional.cross_entropy',
                                  'flowpipe.models.torch.networks.SimpleCNNNetwork', 'flowpipe.config.Config',
                                  'flowpipe.callbacks.early_stopping.EarlyStopping', 'flowpipe.expr.special.PerItem',
                                  'numpy._core.multiarray._reconstruct', 'torch.optim.adamw.AdamW'])
def test_the_safe_reader_rebuilds_data_and_models(name):
    assert name in allowed_names()


def test_every_allowed_name_is_exact_and_names_what_it_holds():
    for name, value in allowed_names().items():
        assert '__' not in name.rsplit('.', 1)[1] or name == 'builtins.Ellipsis', name
        assert not isinstance(value, type(os)), name           # never a module


def test_a_truncated_model_file_is_still_named_as_corrupt(tmp_path):
    from flowpipe import ModelFileError
    model = MLP(_config())
    model.save(tmp_path / 'whole')
    (tmp_path / 'half').write_bytes((tmp_path / 'whole').read_bytes()[:200])
    with pytest.raises(ModelFileError, match='cannot be unpickled'):
        MLP.from_file(tmp_path / 'half')
    assert os.path.getsize(tmp_path / 'half') == 200
