"""The batch-size finder: measured peaks, batchflow's search, the model's state left as it was, clear refusals."""
import copy

import numpy as np
import pytest
import torch

from flowpipe.models.torch import MLP
from flowpipe.models.torch import batch_size as finder

CONFIG = {'inputs/images/shape': (1, 32, 32), 'inputs/labels/classes': 10, 'initial_block/inputs': 'images',
          'body/units': (1024,), 'optimizer': {'name': 'Adam', 'lr': 1e-3}}


def _linear_memory(monkeypatch, base=10.0, per_item=0.5):
    """A probe whose step peaks at ``base + per_item * batch_size`` percent of the memory."""
    def measure(self, step, batch_size):
        peak = int(self.total * (base + per_item * batch_size) / 100)
        self.history.append((batch_size, peak))
        return peak
    monkeypatch.setattr(finder._Probe, 'measure', measure)


@pytest.mark.parametrize('method, options', [
    ('bruteforce', {}),
    ('predictive', {'spread': 0.2, 'delta_batch_size': 16}),
    ('bruteforce', {'start_batch_size': 512}),               # too big at first: the search goes down
])
def test_the_search_finds_the_largest_fitting_size(monkeypatch, method, options):
    _linear_memory(monkeypatch)                                 # 60 % at 100 items
    model = MLP(CONFIG)
    found = model.compute_optimal_batch_size(estimation_method=method, max_memory=60, pbar=False, **options)
    assert found == 100


def test_memory_utilization_is_batchflows_record(monkeypatch):
    _linear_memory(monkeypatch)
    info = MLP(CONFIG).get_memory_utilization(20, method='predict', n=3)
    assert info['memory'] == pytest.approx(20, abs=1e-6) and info['n'] == 3
    assert len(info['monitor'].data) == 3 and info['monitor'].unit == '%' and info['monitor'].device == 'cpu'


def test_a_real_cpu_measurement_grows_with_the_batch_and_leaves_the_model_as_it_was():
    torch.manual_seed(0)
    model = MLP(CONFIG)
    rng = np.random.default_rng(0)
    model.train(images=rng.random((8, 1, 32, 32), dtype='float32'), labels=rng.integers(0, 10, 8))
    weights = {key: value.clone() for key, value in model.model.state_dict().items()}
    optimizer = copy.deepcopy(model.optimizer.state_dict())
    generator = torch.random.get_rng_state()
    small = model.get_memory_utilization(16, n=3)
    large = model.get_memory_utilization(4096, n=3)
    hidden = 4096 * 1024 * 4 * 2                   # the batch's hidden activations and their gradient, float32
    assert (large['monitor'].peak_bytes[-1] - small['monitor'].peak_bytes[-1]) > hidden
    assert 0 < small['memory'] < large['memory'] < 100
    assert all(torch.equal(value, weights[key]) for key, value in model.model.state_dict().items())
    state = model.optimizer.state_dict()['state']
    assert all(torch.equal(state[k]['exp_avg'], optimizer['state'][k]['exp_avg']) for k in state)
    assert model.iteration == 1 and torch.equal(torch.random.get_rng_state(), generator)


def test_refusals_name_the_problem(monkeypatch):
    model = MLP(CONFIG)
    with pytest.raises(RuntimeError, match="CUDA devices or on the CPU.*one kind of device"):
        finder._Probe([torch.device('cpu'), torch.device('cuda', 0)])
    with pytest.raises(ValueError, match="method='train' or 'predict'"):
        model.get_memory_utilization(4, method='fit')
    with pytest.raises(ValueError, match="estimation_method='bruteforce' or 'predictive'"):
        model.compute_optimal_batch_size(estimation_method='guess', pbar=False, max_memory=1e-9)
    with pytest.raises(ValueError, match='batch of 1 item'):
        model.compute_optimal_batch_size(max_memory=1e-9, pbar=False)
    monkeypatch.setattr(finder, '_CLEAR_REFS', '/nonexistent/clear_refs')
    with pytest.raises(RuntimeError, match="peak memory on the CPU.*CUDA device"):
        model.get_memory_utilization(4)


def test_given_inputs_are_repeated_up_to_the_batch_size(monkeypatch):
    seen = []
    original = finder._Session.batch
    monkeypatch.setattr(finder._Session, 'batch', lambda self, size: seen.append(original(self, size)) or seen[-1])
    inputs = np.ones((3, 1, 32, 32), 'float32')
    MLP(CONFIG).get_memory_utilization(7, inputs=inputs, targets=np.arange(3), n=1)
    images, labels = seen[0]
    assert images[0].shape[0] == 7 and labels[0].tolist() == [0, 1, 2, 0, 1, 2, 0]


@pytest.mark.gpu
def test_on_a_gpu_the_finder_measures_cuda_memory():
    model = MLP({**CONFIG, 'device': 'cuda:0'})
    info = model.get_memory_utilization(64, n=2)
    assert 0 < info['memory'] < 100 and info['monitor'].device == 'cuda:0'
    found = model.compute_optimal_batch_size(max_memory=info['memory'] + 1, pbar=False, start_batch_size=16)
    assert found >= 64
