"""Every engine kind that one GPU can hold, each step checked against the same steps on the CPU: a single engine on
cuda:0, two replicas on one GPU (``'GPU:0x2'``), a CPU and a GPU replica, micro-batches, model parallel on cuda:0
and across GPU + CPU; ``amp`` float16 with its gradient scaler and bfloat16; a deterministic run repeated bit for
bit. Run under a float32 and a float64 default dtype (the networks take the default dtype).

Tolerances against the CPU: float64 ``rtol=1e-10, atol=1e-12``; float32 ``rtol=1e-5, atol=1e-6``: a GPU's float32
matrix products (full float32: torch leaves TF32 off for them by default, and these networks have no convolution)
sum in another order than the CPU's, a few units in the last place per step. Skipped where CUDA is absent.
"""
import copy

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.parallel import build_engine, make_plan

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures('default_dtype')]

CLASSES = 3
TOLERANCE = {torch.float64: {'rtol': 1e-10, 'atol': 1e-12}, torch.float32: {'rtol': 1e-5, 'atol': 1e-6}}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.initial_block = nn.Sequential(nn.Linear(5, 16), nn.Tanh())
        self.body = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.head(self.body(self.initial_block(x)))


def net():
    torch.manual_seed(0)
    return Net()


def data(batch_size=12):
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch_size, 5, generator=generator), torch.randint(0, CLASSES, (batch_size,),
                                                                          generator=generator)


def cpu_steps(inputs, targets, steps=2):
    """The hand-written loop on the CPU, in the default dtype: the model after ``steps`` SGD steps, the losses."""
    model = net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model, losses


def engine_steps(plan, inputs, targets, steps=2):
    with build_engine(net(), plan) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.5, momentum=0.9)
        losses = [float(engine.train_step([inputs], [targets], F.cross_entropy, optimizer).loss)
                  for _ in range(steps)]
        replicas = getattr(engine, 'replicas', [engine.module])
        return engine, losses, replicas, engine.predict([inputs])


GPU_CPU_GPU = {'initial_block': 'GPU:0', 'body': 'CPU:0', 'head': 'GPU:0'}
LAYOUTS = [pytest.param({'device': 'GPU:0'}, 'single', id='cuda:0'),
           pytest.param({'device': 'GPU:0', 'microbatch': 5}, 'single', id='cuda:0-microbatch'),
           pytest.param({'device': 'GPU:0x2'}, 'replicas', id='GPU:0x2'),
           pytest.param({'device': 'GPU:0x2', 'microbatch': 5}, 'replicas', id='GPU:0x2-microbatch'),
           pytest.param({'device': ['CPU:0', 'GPU:0']}, 'replicas', id='cpu+gpu'),
           pytest.param({'device': ['GPU:0', 'CPU:0'], 'microbatch': 4}, 'replicas', id='gpu+cpu-microbatch'),
           pytest.param({'device_map': dict.fromkeys(['initial_block', 'body', 'head'], 'GPU:0')}, 'model_parallel',
                        id='model-parallel-cuda:0'),
           pytest.param({'device_map': GPU_CPU_GPU, 'microbatch': 5}, 'model_parallel', id='model-parallel-gpu+cpu')]


@pytest.mark.parametrize('options, kind', LAYOUTS)
def test_each_engine_kind_on_one_gpu_matches_the_cpu_loop(options, kind):
    inputs, targets = data()
    expected, expected_losses = cpu_steps(inputs, targets)
    engine, losses, replicas, predictions = engine_steps(make_plan(**options), inputs, targets)
    tolerance = TOLERANCE[torch.get_default_dtype()]
    assert engine.plan.engine == kind and any(device.type == 'cuda' for device in engine.devices)
    np.testing.assert_allclose(losses, expected_losses, **tolerance)
    for replica in replicas:
        for (name, got), want in zip(replica.named_parameters(), expected.parameters()):
            assert got.dtype == torch.get_default_dtype()
            torch.testing.assert_close(got.detach().cpu(), want.detach(), **tolerance, msg=f'{name} differs')
    assert predictions.device == engine.devices[0]


def amp_losses(plan, steps=30):
    inputs, targets = data(16)
    with build_engine(net().float(), plan) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.2)
        losses = [float(engine.train_step([inputs], [targets], F.cross_entropy, optimizer).loss)
                  for _ in range(steps)]
        return engine, losses


@pytest.mark.parametrize('options', [{'device': 'GPU:0'}, {'device': 'GPU:0x2', 'microbatch': 4},
                                     {'device_map': GPU_CPU_GPU, 'microbatch': 4}],
                         ids=['cuda:0', 'GPU:0x2', 'gpu+cpu'])
@pytest.mark.parametrize('amp', [True, 'bfloat16'])
def test_amp_float16_with_its_scaler_and_bfloat16_train_on_one_gpu(options, amp):
    engine, losses = amp_losses(make_plan(**options, amp=amp))
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    if amp is True:
        assert engine.plan.amp == 'float16' and engine.precision.scaler.scale_device.type == 'cuda'
        assert engine.precision.scaler.get_scale() >= 1.0
    else:
        assert engine.plan.amp == 'bfloat16' and getattr(engine.precision, 'scaler', None) is None


def conv_pipeline(device):
    """A conv net with BatchNorm and dropout on ``device``, trained through a pipeline whose batches go to the GPU
    through pinned memory ahead of the step (AvgPool2d: AdaptiveAvgPool2d has no deterministic CUDA backward)."""
    rng = np.random.default_rng(0)
    data = Dataset(48, preloaded={'images': rng.random((48, 2, 12, 12), dtype=np.float32),
                                  'labels': rng.integers(0, CLASSES, 48)})
    torch.manual_seed(0)
    network = nn.Sequential(nn.Conv2d(2, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Dropout(0.3),
                            nn.Conv2d(8, 8, 3, padding=1), nn.AvgPool2d(6), nn.Flatten(),
                            nn.Linear(32, CLASSES))
    config = {'model': network, 'inputs/images/shape': (2, 12, 12), 'inputs/labels/classes': CLASSES, 'loss': 'ce',
              'optimizer': {'name': 'Adam', 'lr': 0.01}, 'device': device, 'microbatch': 8}
    return (Pipeline().init_variable('loss', []).init_model('net', config=config).to_device('GPU:0')
            .train_model('net', images=B.images, labels=B.labels, fetches='loss', save_to=V('loss', mode='a'))
            << data)


@pytest.mark.parametrize('device', ['GPU:0', 'GPU:0x2'])
def test_a_deterministic_run_on_a_gpu_repeats_bit_for_bit(device):
    runs = []
    for _ in range(2):
        pipeline = conv_pipeline(device)
        pipeline.run(16, n_epochs=2, shuffle=True, seed=3, prefetch=2, deterministic=True)
        runs.append(([p.detach().cpu().clone() for p in pipeline.m('net').model.parameters()], pipeline.v('loss')))
        pipeline.m('net').close()
    assert runs[0][1] == runs[1][1]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][0], runs[1][0]))
    assert not torch.are_deterministic_algorithms_enabled()
