"""Precision objects: the no-op default, mixed precision (run on the CPU in float16), state round trips."""
import copy
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import MixedPrecision, Precision, build_engine, make_plan, make_precision
from flowpipe.parallel.engines import SingleEngine

CPU = torch.device('cpu')


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3))


def data(batch_size=12):
    generator = torch.Generator().manual_seed(1)
    return torch.randn(batch_size, 5, generator=generator), torch.randint(0, 3, (batch_size,), generator=generator)


def test_full_precision_changes_nothing():
    precision, model = Precision(), mlp()
    inputs, targets = data()
    with precision.autocast(CPU):
        outputs = model(inputs)
    loss = F.cross_entropy(outputs, targets)
    assert outputs.dtype == torch.float32
    assert precision.convert_loss(loss) is loss and precision.scale(loss) is loss
    loss.backward()
    reference = copy.deepcopy(model)
    for p, r in zip(model.parameters(), reference.parameters()):
        r.grad = p.grad.clone()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    precision.unscale(optimizer)
    assert all(torch.equal(p.grad, r.grad) for p, r in zip(model.parameters(), reference.parameters()))  # unchanged
    precision.step(optimizer)
    assert all(torch.equal(p, r) for p, r in zip(model.parameters(), reference.parameters()))
    assert precision.scaler is None and repr(precision) == 'Precision()'


def test_full_precision_state_is_empty_and_ignores_a_scaler_state():
    precision = Precision()
    assert precision.state() == {}
    precision.load_state({'scaler': {'scale': 1024.0, '_growth_tracker': 3}})
    assert precision.state() == {}


def test_make_precision_follows_the_plan():
    assert type(make_precision(make_plan(num_gpus=0))) is Precision
    cpu_amp = make_precision(make_plan(amp=True, num_gpus=0))
    assert type(cpu_amp) is MixedPrecision and cpu_amp.dtype == torch.bfloat16 and cpu_amp.scaler is None


def test_mixed_precision_autocasts_its_device_type_whatever_device_a_piece_starts_on():
    precision, model = MixedPrecision(CPU), mlp()
    with precision.autocast(CPU):
        assert model(data()[0]).dtype == torch.float16
    # a model-parallel piece starting on another device type still autocasts the parts of the precision's type
    with precision.autocast(torch.device('meta')):
        assert model(data()[0]).dtype == torch.float16
    assert model(data()[0]).dtype == torch.float32
    assert precision.convert_loss(torch.ones((), dtype=torch.float16)).dtype == torch.float32
    assert float(precision.scale(torch.ones(()))) == 2.0 ** 16
    assert repr(precision) == "MixedPrecision('cpu', torch.float16, scaler=True)"


def hand_written_amp(model, inputs, targets, steps, max_norm):
    """The torch recipe: autocast forward, scaled backward, unscale_, clip_grad_norm_, scaler.step, update."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler('cpu')
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast('cpu', dtype=torch.float16):
            loss = F.cross_entropy(model(inputs), targets)
        scaler.scale(loss.float()).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
    return model, scaler


def test_an_engine_with_mixed_precision_equals_the_torch_recipe():
    model, (inputs, targets) = mlp(), data()
    expected, scaler = hand_written_amp(model, inputs, targets, steps=3, max_norm=0.1)
    plan = make_plan('CPU:0', num_gpus=0)
    engine = SingleEngine(copy.deepcopy(model), plan, MixedPrecision(CPU))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.5)
    for _ in range(3):
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_norm=0.1)
    for a, b in zip(engine.module.parameters(), expected.parameters()):
        assert torch.equal(a, b)
    assert engine.precision.state() == {'scaler': scaler.state_dict()}


def test_the_scaler_steps_once_per_batch_over_replicas_and_micro_batches():
    model, (inputs, targets) = mlp(), data()
    engine = build_engine(model, make_plan(['CPU:0', 'CPU:1'], microbatch=4, num_gpus=0))
    engine.precision = MixedPrecision(CPU)
    with engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        for _ in range(3):
            engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
    state = engine.precision.state()['scaler']
    assert state['_growth_tracker'] == 3 and state['scale'] == 2.0 ** 16


def test_a_step_with_an_infinite_gradient_is_skipped_and_the_scale_backs_off():
    model, (inputs, targets) = mlp(), data()
    engine = SingleEngine(model, make_plan(num_gpus=0), MixedPrecision(CPU))
    before = [p.detach().clone() for p in engine.parameters()]

    def infinite_loss(outputs, targets):
        return F.cross_entropy(outputs, targets) * float('inf')

    engine.train_step([inputs], [targets], infinite_loss, torch.optim.SGD(engine.parameters(), lr=0.1),
                      clip_grad_norm=1.0)
    assert all(torch.equal(a, b) for a, b in zip(before, engine.parameters()))
    assert engine.precision.scaler.get_scale() == 2.0 ** 15


class FailingOnce(torch.optim.SGD):
    """SGD whose first step raises (as an out-of-memory error or a Ctrl-C inside the optimizer would)."""

    failed = False

    def step(self, closure=None):
        if not self.failed:
            self.failed = True
            raise KeyboardInterrupt
        return super().step(closure)


@pytest.mark.parametrize('clip', [None, 1.0])
def test_after_an_interrupted_optimizer_step_the_next_step_unscales_its_own_gradients(clip):
    model, (inputs, targets) = mlp(), data()
    engine = SingleEngine(copy.deepcopy(model), make_plan(num_gpus=0), MixedPrecision(CPU))
    optimizer = FailingOnce(engine.parameters(), lr=0.1)
    with pytest.raises(KeyboardInterrupt):
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_norm=clip)
    engine.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_norm=clip)
    fresh = SingleEngine(model, make_plan(num_gpus=0), MixedPrecision(CPU))
    fresh.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(fresh.parameters(), lr=0.1),
                     clip_grad_norm=clip)
    assert all(torch.equal(a, b) for a, b in zip(engine.parameters(), fresh.parameters()))


def test_mixed_precision_state_round_trip():
    model, (inputs, targets) = mlp(), data()
    engine = SingleEngine(model, make_plan(num_gpus=0), MixedPrecision(CPU))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    engine.train_step([inputs], [targets], lambda o, t: F.cross_entropy(o, t) * float('inf'), optimizer)
    engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
    state = engine.precision.state()
    assert state['scaler']['scale'] == 2.0 ** 15 and state['scaler']['_growth_tracker'] == 1
    restored = MixedPrecision(CPU)
    restored.load_state(copy.deepcopy(state))
    assert restored.state() == state
    fresh = MixedPrecision(CPU)
    fresh.load_state({})                       # saved under full precision: the fresh scaler stays
    assert fresh.state()['scaler']['scale'] == 2.0 ** 16


def test_bfloat16_needs_no_scaler():
    precision = MixedPrecision(CPU, dtype=torch.bfloat16)
    loss = torch.ones(())
    assert precision.scaler is None and precision.scale(loss) is loss and precision.state() == {}
    with precision.autocast(CPU):
        assert mlp()(data()[0]).dtype == torch.bfloat16
    model = mlp()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    F.cross_entropy(model(data()[0]), data()[1]).backward()
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        precision.unscale(optimizer)
        precision.step(optimizer)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
def test_amp_on_a_gpu_plan_is_mixed_precision_with_a_scaler_on_the_primary():
    precision = make_precision(make_plan('GPU:0', amp=True))
    assert type(precision) is MixedPrecision and precision.device_type == 'cuda'
    assert precision.scaler.get_scale() == 2.0 ** 16
    assert precision.state()['scaler']['scale'] == 2.0 ** 16
