"""Sharpness-aware minimization in the engines: one step equals a hand-written SAM step whatever the split."""
import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import MixedPrecision, build_engine, make_plan
from flowpipe.parallel.engines import SingleEngine
from flowpipe.parallel.engines.sam import Sam, make_sam, perturbation

from .test_engines import data, mlp

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

RHO = 0.05


def sam_reference(model, inputs, targets, individual, steps=1, max_norm=None, lr=0.5, momentum=0.9):
    """SAM written out: the gradient g at w, e = rho * g / ||g|| (per parameter or whole), the gradient at w + e,
    w restored, (clipping), the optimizer step; returns the model and the first pass's losses."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    params, losses = list(model.parameters()), []
    for _ in range(steps):
        loss = F.cross_entropy(model(inputs.double()), targets)
        grads = torch.autograd.grad(loss, params)
        if individual:
            shifts = [RHO * g / g.norm(2) for g in grads]
        else:
            whole = torch.sqrt(sum((g * g).sum() for g in grads))
            shifts = [RHO * g / whole for g in grads]
        weights = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, e in zip(params, shifts):
                p.add_(e)
        optimizer.zero_grad()
        F.cross_entropy(model(inputs.double()), targets).backward()
        with torch.no_grad():
            for p, w in zip(params, weights):
                p.copy_(w)
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(params, max_norm)
        optimizer.step()
        losses.append(float(loss.detach()))
    return model, losses


def sam_engine(model, plan, inputs, targets, individual, steps=1, **step_options):
    with build_engine(copy.deepcopy(model), plan) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.5, momentum=0.9)
        losses = [float(engine.train_step([inputs], [targets], F.cross_entropy, optimizer,
                                          sam=make_sam(RHO, individual), **step_options).loss)
                  for _ in range(steps)]
        return engine.module, list(engine.replicas), losses


def assert_close(actual, expected, tolerance=1e-12):
    for (name, a), b in zip(actual.named_parameters(), expected.parameters()):
        torch.testing.assert_close(a.detach(), b.detach(), rtol=tolerance, atol=tolerance, msg=f'{name} differs')


@pytest.mark.parametrize('individual', [True, False])
@pytest.mark.parametrize('devices, microbatch', [('cpu', None), ('cpu', 5), (['CPU:0', 'CPU:1'], None),
                                                 (['CPU:0', 'CPU:1'], 5), (['CPU:0', 'CPU:1', 'CPU:2'], 2)])
def test_a_sam_step_equals_the_hand_written_one(individual, devices, microbatch):
    model, (inputs, targets) = mlp(), data(12)
    expected, expected_losses = sam_reference(model, inputs, targets, individual, steps=2)
    actual, replicas, losses = sam_engine(model, make_plan(devices, microbatch, num_gpus=0), inputs, targets,
                                          individual, steps=2)
    assert losses == pytest.approx(expected_losses, rel=1e-12)
    for replica in replicas:
        assert_close(replica, expected)


def test_the_two_norm_options_differ_and_sam_differs_from_a_plain_step():
    model, (inputs, targets) = mlp(), data(12)
    plan = make_plan('cpu', num_gpus=0)
    one, _, _ = sam_engine(model, plan, inputs, targets, True)
    whole, _, _ = sam_engine(model, plan, inputs, targets, False)
    with build_engine(copy.deepcopy(model), plan) as engine:
        engine.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=0.5,
                                                                                momentum=0.9))
        plain = engine.module
    for a, b, c in zip(one.parameters(), whole.parameters(), plain.parameters()):
        assert not torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(b, c)


def test_clipping_clips_the_gradient_of_the_second_pass():
    model, (inputs, targets) = mlp(), data(12)
    expected, _ = sam_reference(model, inputs, targets, True, max_norm=0.01)
    actual, _, _ = sam_engine(model, make_plan(['CPU:0', 'CPU:1'], 4, num_gpus=0), inputs, targets, True,
                              clip_grad_norm=0.01)
    assert_close(actual, expected)


def test_a_zero_gradient_moves_nothing():
    grads = [torch.zeros(3, dtype=torch.float64), torch.tensor([3.0, 4.0], dtype=torch.float64)]
    norms = [g.norm() for g in grads]
    individual = perturbation(grads, Sam(0.5, True), norms)
    assert torch.equal(individual[0], torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(individual[1], torch.tensor([0.3, 0.4], dtype=torch.float64))
    whole = perturbation([torch.zeros(2)], Sam(0.5, False), [torch.zeros(())])
    assert torch.equal(whole[0], torch.zeros(2))


@pytest.mark.parametrize('rho, individual, error', [
    ('0.1', True, TypeError), (True, True, TypeError), (-0.1, True, ValueError), (float('nan'), True, ValueError),
    (0.1, 'yes', TypeError)])
def test_bad_options_are_named(rho, individual, error):
    with pytest.raises(error, match='sam_'):
        make_sam(rho, individual)


def test_off_values():
    assert make_sam(0) is None and make_sam(None) is None and make_sam(False) is None and make_sam(0.0) is None
    assert make_sam(0.1, False) == Sam(0.1, False)


@pytest.mark.parametrize('devices', ['cpu', ['CPU:0', 'CPU:1']])
def test_batchnorm_statistics_are_those_of_the_first_pass(devices):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, 3)).double()
    inputs, targets = data(12)
    buffers = []
    for sam in (None, make_sam(RHO)):
        with build_engine(copy.deepcopy(model), make_plan(devices, num_gpus=0)) as engine:
            engine.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=0.1),
                              sam=sam)
            buffers.append([[b.clone() for b in replica.buffers()] for replica in engine.replicas])
    plain, sharp = buffers
    for one, other in zip(plain, sharp):
        assert all(torch.equal(a, b) for a, b in zip(one, other))


class FailingSecondPass:
    """A loss that raises in the second pass of the first step (as a Ctrl-C there would)."""

    def __init__(self, pieces):
        self.calls, self.pieces = 0, pieces

    def __call__(self, outputs, targets):
        self.calls += 1
        if self.calls == self.pieces + 1:
            raise KeyboardInterrupt
        return F.cross_entropy(outputs, targets)


def test_an_error_in_the_second_pass_leaves_every_replica_at_the_weights_before_the_step():
    model, (inputs, targets) = mlp(), data(12)
    with build_engine(copy.deepcopy(model), make_plan(['CPU:0', 'CPU:1'], num_gpus=0)) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.5)
        with pytest.raises(KeyboardInterrupt):
            engine.train_step([inputs], [targets], FailingSecondPass(2), optimizer, sam=make_sam(RHO))
        for replica in engine.replicas:
            assert all(torch.equal(a, b) for a, b in zip(replica.parameters(), model.parameters()))


def test_a_nonfinite_second_pass_is_skipped_with_the_weights_restored():
    model, (inputs, targets) = mlp(), data(12)
    calls = []

    def second_pass_nan(outputs, targets):
        calls.append(1)
        loss = F.cross_entropy(outputs, targets)
        return loss * float('nan') if len(calls) == 2 else loss

    with build_engine(copy.deepcopy(model), make_plan('cpu', num_gpus=0)) as engine:
        engine.skip_nonfinite = True
        result = engine.train_step([inputs], [targets], second_pass_nan, torch.optim.SGD(engine.parameters(), lr=0.5),
                                   sam=make_sam(RHO))
        assert not result.stepped and len(calls) == 2
        assert all(torch.equal(a, b) for a, b in zip(engine.module.parameters(), model.parameters()))


def test_a_nonfinite_first_pass_runs_no_second_pass():
    model, (inputs, targets) = mlp(), data(12)
    calls = []

    def infinite(outputs, targets):
        calls.append(1)
        return F.cross_entropy(outputs, targets) * float('inf')

    with build_engine(copy.deepcopy(model), make_plan('cpu', num_gpus=0)) as engine:
        engine.skip_nonfinite = True
        result = engine.train_step([inputs], [targets], infinite, torch.optim.SGD(engine.parameters(), lr=0.5),
                                   sam=make_sam(RHO))
    assert not result.stepped and len(calls) == 1


def amp_sam_reference(model, inputs, targets, device, steps):
    """SAM under torch's amp recipe: the first pass's scaled gradient unscaled before its norm, the second pass
    scaled alike, then scaler.step and update."""
    model = copy.deepcopy(model).to(device)
    inputs, targets = inputs.to(device), targets.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler(device.type)
    params = list(model.parameters())
    for _ in range(steps):
        with torch.autocast(device.type, dtype=torch.float16):
            loss = F.cross_entropy(model(inputs), targets)
        grads = [g / scaler.get_scale() for g in torch.autograd.grad(scaler.scale(loss.float()), params)]
        shifts = [RHO * g / g.norm(2) for g in grads]
        weights = [p.detach().clone() for p in params]
        with torch.no_grad():
            for p, e in zip(params, shifts):
                p.add_(e)
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.float16):
            second = F.cross_entropy(model(inputs), targets)
        scaler.scale(second.float()).backward()
        with torch.no_grad():
            for p, w in zip(params, weights):
                p.copy_(w)
        scaler.step(optimizer)
        scaler.update()
    return model, scaler


def amp_sam_engine(model, inputs, targets, device, steps):
    plan = make_plan(str(device), num_gpus=None if device.type == 'cuda' else 0)
    engine = SingleEngine(copy.deepcopy(model).float(), plan, MixedPrecision(device))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.5)
    for _ in range(steps):
        engine.train_step([inputs.to(device)], [targets.to(device)], F.cross_entropy, optimizer, sam=make_sam(RHO))
    return engine


def test_amp_float16_with_a_scaler_on_the_cpu_equals_the_torch_recipe():
    model, (inputs, targets) = mlp().float(), data(12)
    cpu = torch.device('cpu')
    expected, scaler = amp_sam_reference(model, inputs, targets, cpu, steps=3)
    engine = amp_sam_engine(model, inputs, targets, cpu, steps=3)
    for a, b in zip(engine.module.parameters(), expected.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert engine.precision.state() == {'scaler': scaler.state_dict()}


def test_an_overflow_in_the_first_pass_skips_the_step_and_lowers_the_scale():
    model, (inputs, targets) = mlp().float(), data(12)
    calls = []

    def infinite(outputs, targets):
        calls.append(1)
        return F.cross_entropy(outputs, targets) * float('inf')

    engine = SingleEngine(copy.deepcopy(model), make_plan('cpu', num_gpus=0), MixedPrecision(torch.device('cpu')))
    engine.train_step([inputs], [targets], infinite, torch.optim.SGD(engine.parameters(), lr=0.5), sam=make_sam(RHO))
    assert len(calls) == 1 and engine.precision.scaler.get_scale() == 2.0 ** 15
    assert all(torch.equal(a, b) for a, b in zip(engine.module.parameters(), model.parameters()))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
def test_amp_on_a_gpu_equals_the_torch_recipe():
    model, (inputs, targets) = mlp().float(), data(12)
    cuda = torch.device('cuda:0')
    expected, scaler = amp_sam_reference(model, inputs, targets, cuda, steps=5)
    engine = amp_sam_engine(model, inputs, targets, cuda, steps=5)
    for a, b in zip(engine.module.parameters(), expected.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert engine.precision.state() == {'scaler': scaler.state_dict()}


def test_a_model_split_over_devices_takes_the_hand_written_sam_step():
    from .test_model_parallel import net
    model, (inputs, targets) = net(), data(9, shape=(4,))
    expected, _ = sam_reference(model, inputs, targets, False, steps=2)
    plan = make_plan(device_map={'initial_block': 'CPU:0', 'body': 'CPU:1', 'head': 'CPU:1'}, microbatch=4,
                     num_gpus=0)
    actual, _, _ = sam_engine(model, plan, inputs, targets, False, steps=2)
    assert_close(actual, expected)
