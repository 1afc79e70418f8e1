"""Weight averaging (``weights_averaging`` / ``wa`` / ``swa``): the average equals ``AveragedModel`` driven by hand,
predicts, saves and loads."""
import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.models.torch import TorchModel
from flowpipe.models.torch.averaging import Ema

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

N_FEATURES, CLASSES = 5, 3


def network(batch_norm=False):
    torch.manual_seed(0)
    middle = [nn.BatchNorm1d(8)] if batch_norm else []
    return nn.Sequential(nn.Linear(N_FEATURES, 8), *middle, nn.Tanh(), nn.Linear(8, CLASSES)).double()


def batches(count, size=10, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(size, N_FEATURES)), rng.integers(0, CLASSES, size)) for _ in range(count)]


def config(averaging, net=None, **extra):
    return {'model': copy.deepcopy(net or network()), 'inputs/x/shape': (N_FEATURES,), 'inputs/y/classes': CLASSES,
            'loss': 'ce', 'optimizer': {'name': 'SGD', 'lr': 0.1, 'momentum': 0.9}, 'weights_averaging': averaging,
            **extra}


def by_hand(data, start, last, frequency, avg_fn=None, swalr=None, net=None):
    """A plain SGD loop with an AveragedModel updated after batch i when start <= i < last and
    (i - start) % frequency == 0; after batch last the network takes the average and SGD starts afresh."""
    model = copy.deepcopy(net or network())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    averaged = AveragedModel(model, avg_fn=avg_fn)
    scheduler = None if swalr is None else SWALR(optimizer, **swalr)
    lrs = []
    for i, (x, y) in enumerate(data, start=1):
        optimizer.zero_grad()
        F.cross_entropy(model(torch.as_tensor(x)), torch.as_tensor(y)).backward()
        optimizer.step()
        if i == last:
            model.load_state_dict(averaged.module.state_dict())
            optimizer = torch.optim.SGD(model.parameters(), lr=optimizer.param_groups[0]['lr'], momentum=0.9)
        elif start <= i < last and (i - start) % frequency == 0:
            averaged.update_parameters(model)
            if scheduler is not None:
                scheduler.step()
        lrs.append(optimizer.param_groups[0]['lr'])
    return model, averaged, lrs


def trained(model, data):
    lrs = []
    for x, y in data:
        model.train(x=x, y=y)
        lrs.append(model.optimizer.param_groups[0]['lr'])
    return lrs


def assert_equal(actual, expected):
    for a, b in zip(actual, expected):
        assert torch.equal(a.detach().cpu(), b.detach().cpu())


def ema_by_hand(averaged, current, num_averaged):
    return 0.1 * averaged + 0.9 * current      # batchflow's exponential average


@pytest.mark.parametrize('avg_fn, reference', [('swa', None), ('ema', ema_by_hand),
                                               (lambda a, c, n: (a + c) / 2, lambda a, c, n: (a + c) / 2)])
def test_the_average_equals_averaged_model_driven_by_hand(avg_fn, reference):
    data = batches(9)
    model = TorchModel(config({'start_iter': 2, 'last_iter': 20, 'frequency': 3, 'avg_fn': avg_fn}))
    trained(model, data)
    _, expected, _ = by_hand(data, 2, 20, 3, reference)
    assert model.averaging.iterations == [2, 5, 8] and int(model.averaging.averaged.n_averaged) == 3
    assert_equal(model.averaging.module.parameters(), expected.module.parameters())


def test_after_last_iter_the_network_takes_the_average_and_the_optimizer_starts_afresh():
    data = batches(8)
    model = TorchModel(config({'start_iter': 1, 'last_iter': 5, 'frequency': 2}))
    trained(model, data)
    expected, averaged, _ = by_hand(data, 1, 5, 2)
    assert model.averaging.finalized and model.averaging.iterations == [1, 3, 5]
    assert_equal(model.averaging.module.parameters(), averaged.module.parameters())
    assert_equal(model.model.parameters(), expected.parameters())


def test_swalr_steps_with_every_update():
    data = batches(7)
    swalr = {'swa_lr': 0.01, 'anneal_epochs': 3, 'anneal_strategy': 'linear'}
    model = TorchModel(config({'start_iter': 2, 'last_iter': 30, 'frequency': 1, 'swalr': swalr}))
    lrs = trained(model, data)
    expected, _, expected_lrs = by_hand(data, 2, 30, 1, swalr=swalr)
    assert lrs == expected_lrs and lrs[-1] == pytest.approx(0.01)
    assert_equal(model.model.parameters(), expected.parameters())


@pytest.mark.parametrize('key', ['wa', 'swa'])
def test_batchflow_s_other_names(key):
    data = batches(4)
    model = TorchModel({**config(None), key: {'start_iter': 1, 'last_iter': 10, 'frequency': 1}})
    trained(model, data)
    _, expected, _ = by_hand(data, 1, 10, 1)
    assert_equal(model.averaging.module.parameters(), expected.module.parameters())


def test_replicas_and_micro_batches_average_the_same_weights():
    data = batches(6, size=11)
    model = TorchModel(config({'start_iter': 1, 'last_iter': 10, 'frequency': 2, 'avg_fn': 'ema'},
                              device=['CPU:0', 'CPU:1'], microbatch=3))
    with model:
        trained(model, data)
        _, expected, _ = by_hand(data, 1, 10, 2, ema_by_hand)
        for a, b in zip(model.averaging.module.parameters(), expected.module.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)


def test_predict_with_the_average():
    data = batches(5)
    model = TorchModel(config({'start_iter': 1, 'last_iter': 10, 'frequency': 1}, microbatch=4))
    trained(model, data)
    x = data[0][0]
    with torch.no_grad():
        expected = model.averaging.module(torch.as_tensor(x)).numpy()
    np.testing.assert_array_equal(model.predict(x=x, use_averaged=True), expected)
    assert not np.array_equal(model.predict(x=x), expected)
    labels = model.predict(x=x, fetches='labels', use_averaged=True)
    np.testing.assert_array_equal(labels, expected.argmax(axis=1))


def test_predict_model_action_with_the_average():
    x, y = batches(1, size=12)[0]
    dataset = Dataset(12, preloaded={'x': x, 'y': y})
    cfg = config({'start_iter': 1, 'last_iter': 10, 'frequency': 1})
    pipeline = (Pipeline().init_variable('averaged').init_variable('plain')
                .init_model('net', config=cfg)
                .train_model('net', x=B.x, y=B.y)
                .predict_model('net', x=B.x, use_averaged=True, save_to=V('averaged'))
                .predict_model('net', x=B.x, save_to=V('plain'))) << dataset
    pipeline.run(4, n_epochs=1)
    model = pipeline.m('net')
    with torch.no_grad():
        expected = model.averaging.module(torch.as_tensor(x[8:])).numpy()
    np.testing.assert_array_equal(pipeline.v('averaged'), expected)
    assert not np.array_equal(pipeline.v('plain'), expected)


def test_predicting_with_the_average_needs_one():
    model = TorchModel({k: v for k, v in config(None).items() if k != 'weights_averaging'})
    with pytest.raises(ValueError, match="'weights_averaging'.*use_averaged"):
        model.predict(x=batches(1)[0][0], use_averaged=True)


def test_save_and_load_keep_the_average(tmp_path):
    data = batches(8)
    averaging = {'start_iter': 1, 'last_iter': 30, 'frequency': 2, 'swalr': {'swa_lr': 0.02, 'anneal_epochs': 2}}
    model = TorchModel(config(averaging))
    trained(model, data[:5])
    model.save(tmp_path / 'net.model')
    loaded = TorchModel.from_file(tmp_path / 'net.model')
    assert loaded.averaging.iterations == model.averaging.iterations == [1, 3, 5]
    assert_equal(loaded.averaging.averaged.state_dict().values(), model.averaging.averaged.state_dict().values())
    trained(model, data[5:])
    trained(loaded, data[5:])
    assert_equal(loaded.averaging.module.parameters(), model.averaging.module.parameters())
    assert loaded.optimizer.param_groups[0]['lr'] == model.optimizer.param_groups[0]['lr']
    copied = copy.deepcopy(model)           # a pickled model travels with its average too
    assert_equal(copied.averaging.module.parameters(), model.averaging.module.parameters())


def test_update_bn_recomputes_the_averaged_statistics():
    data = batches(4)
    net = network(batch_norm=True)
    model = TorchModel(config({'start_iter': 1, 'last_iter': 10, 'frequency': 1, 'avg_fn': Ema(0.5)}, net=net))
    trained(model, data)
    expected = copy.deepcopy(model.averaging.module)
    update_bn([torch.as_tensor(x) for x, _ in data], expected)
    model.averaging.update_bn([(x, y) for x, y in data])
    assert_equal(model.averaging.module.buffers(), expected.buffers())


@pytest.mark.parametrize('averaging, error, match', [
    ({'start_iter': 1, 'frequency': 1}, ValueError, r"missing \['last_iter'\]"),
    ({'start_iter': 1, 'last_iter': 5, 'frequency': 1, 'every': 2}, ValueError, r"unknown \['every'\]"),
    ({'start_iter': 5, 'last_iter': 2, 'frequency': 1}, ValueError, 'last_iter'),
    ({'start_iter': 1, 'last_iter': 5, 'frequency': 0}, ValueError, 'frequency'),
    ({'start_iter': 1, 'last_iter': 5, 'frequency': 1, 'avg_fn': 'mean'}, ValueError, 'avg_fn'),
    ({'start_iter': 1, 'last_iter': 5, 'frequency': 1, 'avg_fn': 'ema', 'ema_decay': 1.5}, ValueError, 'ema_decay'),
    ({'start_iter': 1, 'last_iter': 5, 'frequency': 1, 'swalr': 0.1}, TypeError, 'swalr'),
    (10, TypeError, 'start_iter')])
def test_bad_configs_are_named(averaging, error, match):
    with pytest.raises(error, match=match):
        TorchModel(config(averaging))


def test_two_names_of_the_key_are_refused():
    options = {'start_iter': 1, 'last_iter': 5, 'frequency': 1}
    with pytest.raises(ValueError, match="Keep one"):
        TorchModel({**config(options), 'swa': options})


def test_the_average_before_its_first_update_is_refused():
    data = batches(4)
    model = TorchModel(config({'start_iter': 3, 'last_iter': 10, 'frequency': 1}))
    trained(model, data[:2])
    with pytest.raises(ValueError, match='at least one update.*after training batch 3.*without use_averaged'):
        model.predict(x=data[0][0], use_averaged=True)
    trained(model, data[2:3])
    with torch.no_grad():
        expected = model.averaging.module(torch.as_tensor(data[0][0])).numpy()
    np.testing.assert_array_equal(model.predict(x=data[0][0], use_averaged=True), expected)


@pytest.mark.parametrize('averaging, match', [
    ({'swalr': {'swa_lr': -1}}, 'swa_lr as a finite learning rate >= 0'),
    ({'swalr': {'swa_lr': [0.1, float('nan')]}}, 'swa_lr as a finite learning rate >= 0'),
    ({'swalr': {'anneal_epochs': 2}}, 'swa_lr as a finite learning rate >= 0'),
    ({'ema_decay': 1.5}, "ema_decay only with avg_fn='ema'"),
    ({'avg_fn': 'swa', 'ema_decay': 0.5}, "ema_decay only with avg_fn='ema'"),
    ({'avg_fn': 'ema', 'ema_decay': float('nan')}, r'ema_decay as a number in \[0, 1\)'),
    ({'start_iter': 5, 'last_iter': 5}, 'last_iter after the first update.*batch 5'),
    ({'start_iter': 0, 'last_iter': 5, 'frequency': 10}, 'last_iter after the first update.*batch 10')])
def test_out_of_range_options_are_refused(averaging, match):
    with pytest.raises(ValueError, match=match):
        TorchModel(config({'start_iter': 1, 'last_iter': 5, 'frequency': 1, **averaging}))
