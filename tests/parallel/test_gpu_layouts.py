"""Every GPU layout: replicas on several GPUs and on one (``GPU:0x2``), the CPU beside GPUs, model parallel across
GPUs and GPU+CPU, mixed precision with each, saving on a GPU and loading on the CPU and back, a primary other than
cuda:0. Run with ``pytest -m gpu tests/parallel/test_gpu_layouts.py`` on a machine with CUDA (two GPUs for the
multi-GPU cases); skipped elsewhere."""
import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.models.torch import TorchModel
from flowpipe.parallel import build_engine, make_plan

pytestmark = pytest.mark.gpu
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
two_gpus = pytest.mark.skipif(GPUS < 2, reason='needs two CUDA devices')


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.initial_block = nn.Sequential(nn.Linear(5, 16), nn.Tanh())
        self.body = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.body(self.initial_block(x)))


def net(dtype=torch.float64):
    torch.manual_seed(0)
    return Net().to(dtype)


def data(batch_size=12):
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch_size, 5, generator=generator), torch.randint(0, 3, (batch_size,), generator=generator)


def reference(model, inputs, targets, steps=2):
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(inputs.double()), targets).backward()
        optimizer.step()
    return model


def trained(plan, inputs, targets, model=None, steps=2):
    """The engine after ``steps`` SGD steps (closed), the losses, and its predictions for ``inputs``."""
    with build_engine(copy.deepcopy(model or net()), plan) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.5)
        losses = [float(engine.train_step([inputs], [targets], F.cross_entropy, optimizer).loss)
                  for _ in range(steps)]
        return engine, losses, engine.predict([inputs])


def assert_matches(engine, expected):
    for (name, a), b in zip(engine.module.named_parameters(), expected.parameters()):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-10, atol=1e-12, msg=f'parameter {name} differs')
    for replica in getattr(engine, 'replicas', [])[1:]:
        for a, b in zip(replica.parameters(), engine.module.parameters()):
            assert torch.equal(a.cpu(), b.cpu())


LAYOUTS = [pytest.param('GPU:0x2', id='GPU:0x2'), pytest.param(['CPU:0', 'GPU:0'], id='cpu-primary+gpu'),
           pytest.param(['GPU:0', 'CPU:0'], id='gpu-primary+cpu'),
           pytest.param(['GPU:0', 'GPU:1'], id='two-gpus', marks=two_gpus),
           pytest.param('GPU:1x2', id='GPU:1x2', marks=two_gpus),
           pytest.param(['GPU:1', 'GPU:0', 'CPU:0'], id='gpu1-primary+gpu0+cpu', marks=two_gpus)]


@pytest.mark.parametrize('device', LAYOUTS)
@pytest.mark.parametrize('microbatch', [None, 5])
def test_replicas_match_the_full_batch_step(device, microbatch):
    inputs, targets = data()
    engine, _, predictions = trained(make_plan(device, microbatch), inputs, targets)
    assert_matches(engine, reference(net(), inputs, targets))
    assert predictions.device == engine.devices[0]


@pytest.mark.parametrize('device', LAYOUTS)
def test_inputs_already_on_a_gpu_work_with_every_layout(device):
    inputs, targets = data()
    engine, _, _ = trained(make_plan(device, 5), inputs.cuda(), targets.cuda())
    assert_matches(engine, reference(net(), inputs, targets))


class AllocatesOnCuda(Net):
    """User code that allocates on ``'cuda'`` (the current device) inside forward."""

    def forward(self, x):
        return super().forward(x + torch.zeros(1, dtype=x.dtype, device='cuda'))


@two_gpus
@pytest.mark.parametrize('device, device_map', [('GPU:1', None), ('GPU:1x2', None), (['GPU:1', 'GPU:0'], None),
                                                (None, {'initial_block': 'GPU:1', 'head': 'GPU:0'})])
def test_a_primary_other_than_cuda_0_is_the_current_device(device, device_map):
    inputs, targets = data()
    model = AllocatesOnCuda().double()
    _, losses, predictions = trained(make_plan(device, 5, device_map=device_map), inputs, targets, model=model)
    assert np.isfinite(losses).all() and predictions.device == torch.device('cuda', 1)


MAPS = [pytest.param({'initial_block': 'GPU:0', 'body': 'CPU:0', 'head': 'GPU:0'}, id='gpu-cpu-gpu'),
        pytest.param({'initial_block': 'CPU:0', 'body': 'GPU:0'}, id='cpu-first'),
        pytest.param({'initial_block': 'GPU:0', 'body': 'GPU:1', 'head': 'GPU:1'}, id='two-gpus', marks=two_gpus),
        pytest.param({'initial_block': 'GPU:1', 'body': 'CPU:0', 'head': 'GPU:0'}, id='gpu1-cpu-gpu0',
                     marks=two_gpus)]


@pytest.mark.parametrize('device_map', MAPS)
@pytest.mark.parametrize('microbatch', [None, 5])
def test_model_parallel_matches_one_device(device_map, microbatch):
    inputs, targets = data()
    engine, _, _ = trained(make_plan(device_map=device_map, microbatch=microbatch), inputs, targets)
    assert_matches(engine, reference(net(), inputs, targets))


def amp_run(plan, steps=30):
    inputs, targets = data(16)
    with build_engine(net(torch.float32), plan) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.2)
        losses = [float(engine.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_norm=5.0).loss)
                  for _ in range(steps)]
        return engine, losses, engine.predict([inputs])


@pytest.mark.parametrize('device', LAYOUTS)
def test_amp_trains_with_replicas_on_every_layout(device):
    engine, losses, _ = amp_run(make_plan(device, 4, amp=True))
    assert engine.precision.scaler.scale_device.type == 'cuda' and np.isfinite(losses).all()
    assert losses[-1] < losses[0] and engine.precision.scaler.get_scale() >= 1.0


@pytest.mark.parametrize('device_map', MAPS)
def test_amp_trains_model_parallel_with_gpu_and_cpu_parts(device_map):
    engine, losses, predictions = amp_run(make_plan(device_map=device_map, microbatch=4, amp=True))
    assert np.isfinite(losses).all() and losses[-1] < losses[0] and predictions.device == engine.devices[0]


def test_an_inf_gradient_in_a_cpu_part_skips_the_step():
    plan = make_plan(device_map={'initial_block': 'GPU:0', 'body': 'CPU:0', 'head': 'GPU:0'}, amp=True)
    inputs, targets = data(16)
    with build_engine(net(torch.float32), plan) as engine:
        engine.module.body[0].weight.register_hook(lambda grad: grad * float('inf'))
        before = [p.detach().clone() for p in engine.parameters()]
        scale = engine.precision.scaler.get_scale()
        engine.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=0.2))
        assert all(torch.equal(a, b) for a, b in zip(before, engine.parameters()))
        assert engine.precision.scaler.get_scale() == scale / 2


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(5, 8)
        self.left = nn.Linear(8, 3)
        self.right = nn.Linear(8, 1)

    def forward(self, x):
        features = torch.tanh(self.trunk(x))
        return self.left(features), self.right(features)


def two_losses(outputs, labels, values):
    left, right = outputs              # each target arrives on its output's device; the sum is the user's to place
    assert labels.device == left.device and values.device == right.device
    return F.cross_entropy(left, labels) + F.mse_loss(right.squeeze(1), values).to(left.device)


@two_gpus
def test_targets_go_to_the_device_of_their_output():
    inputs, labels = data()
    values = torch.randn(12)
    plan = make_plan(device_map={'trunk': 'GPU:0', 'left': 'GPU:0', 'right': 'GPU:1'}, microbatch=5)
    with build_engine(TwoHeads(), plan) as engine:
        result = engine.train_step([inputs], [labels, values], two_losses, torch.optim.SGD(engine.parameters(), 0.1))
    assert np.isfinite(float(result.loss))


@pytest.mark.parametrize('config', [
    pytest.param({'device': 'GPU:0x2'}, id='GPU:0x2'),
    pytest.param({'device_map': {'initial_block': 'GPU:0', 'body': 'CPU:0', 'head': 'GPU:0'}}, id='gpu+cpu'),
    pytest.param({'device_map': {'initial_block': 'GPU:0', 'body': 'GPU:1'}}, id='two-gpus', marks=two_gpus)])
def test_save_on_gpu_load_on_cpu_and_back(tmp_path, config):
    inputs, targets = data()
    model = TorchModel({'model': net(torch.float32), 'loss': 'ce', 'amp': True, **config})
    for _ in range(3):
        model.train(inputs.numpy(), targets.numpy())
    model.save(tmp_path / 'gpu.pkl')
    # amp=True on CPU devices only is bfloat16 autocast: compare in full precision
    assert TorchModel.from_file(tmp_path / 'gpu.pkl', device='cpu', device_map=None).plan.amp == 'bfloat16'
    on_cpu = TorchModel.from_file(tmp_path / 'gpu.pkl', device='cpu', device_map=None, amp=False)
    assert on_cpu.engine.precision.scaler is None                     # the saved scale is ignored in float32
    np.testing.assert_allclose(on_cpu.predict(inputs.numpy()), model.predict(inputs.numpy()).astype('float32'),
                               rtol=1e-2, atol=1e-2)                  # float16 outputs on the GPU
    on_cpu.save(tmp_path / 'cpu.pkl')
    back = TorchModel.from_file(tmp_path / 'gpu.pkl')
    assert back.engine.precision.state() == model.engine.precision.state()    # the scale is kept
    assert back.train(inputs.numpy(), targets.numpy(), fetches='loss') == pytest.approx(
        model.train(inputs.numpy(), targets.numpy(), fetches='loss'), rel=1e-5)
    again = TorchModel.from_file(tmp_path / 'cpu.pkl', **{'device': None, 'device_map': None, **config})
    np.testing.assert_allclose(again.predict(inputs.numpy()), on_cpu.predict(inputs.numpy()), rtol=1e-5, atol=1e-6)
    for each in (model, on_cpu, back, again):
        each.close()


@pytest.mark.parametrize('names', [pytest.param(['cuda:0', 'cuda:0'], id='one-gpu'),
                                   pytest.param(['cpu', 'cuda:0'], id='cpu+gpu'),
                                   pytest.param(['cuda:0', 'cpu', 'cuda:0'], id='gpu+cpu+gpu'),
                                   pytest.param(['cuda:0', 'cuda:1'], id='two-gpus', marks=two_gpus),
                                   pytest.param(['cuda:1', 'cuda:0', 'cpu'], id='gpu1+gpu0+cpu', marks=two_gpus)])
@pytest.mark.parametrize('flatten', [False, True])
def test_coalesced_reduction_and_broadcast_equal_the_per_tensor_reference(names, flatten):
    from flowpipe.parallel.engines.reduce import broadcast, reduce_gradients, reduce_per_tensor
    devices = [torch.device(name) for name in names]
    generator = torch.Generator().manual_seed(3)
    values = [[torch.randn(shape, generator=generator) for shape in [(16, 5), (16,), (3, 16), (3,)] * 30]
              for _ in devices]

    def placed():
        params = [[nn.Parameter(torch.zeros_like(v, device=device)) for v in replica]
                  for replica, device in zip(values, devices)]
        for replica, grads in zip(params, values):
            for param, grad in zip(replica, grads):
                param.grad = grad.to(param.device, copy=True)
        return params

    expected, actual = placed(), placed()
    reduce_per_tensor(expected, range(len(devices)))
    reduce_gradients(actual, range(len(devices)), devices, flatten=flatten)
    for a, b in zip(actual[0], expected[0]):
        assert a.grad.device == devices[0]
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=1e-6)     # NCCL may sum in another order
    for param, grad in zip(actual[0], values[0]):
        param.data.copy_(grad)
    broadcast(actual, devices, flatten=flatten)
    for replica in actual[1:]:
        assert all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(replica, actual[0]))


def test_saving_a_gpu_model_makes_no_second_copy_on_the_gpu(tmp_path):
    model = TorchModel({'model': nn.Sequential(nn.Linear(1024, 4096), nn.Linear(4096, 3)), 'loss': 'ce',
                        'device': 'GPU:0'})
    weights = sum(p.numel() * p.element_size() for p in model.model.parameters())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    model.save(tmp_path / 'gpu.pkl')
    assert torch.cuda.max_memory_allocated() - before < weights / 4
    loaded = TorchModel.from_file(tmp_path / 'gpu.pkl', device='cpu')
    torch.testing.assert_close(loaded.model[0].weight, model.model[0].weight.cpu())
