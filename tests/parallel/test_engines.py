"""Engines: one step with any device list and micro-batch size equals a hand-written full-batch step."""
import contextlib
import copy
import gc
import threading
from dataclasses import replace

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import build_engine, make_plan
from flowpipe.parallel.engines import DistributedEngine, ReplicaEngine, SingleEngine
from flowpipe.parallel.precision import make_precision

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

CLASSES = 3


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, CLASSES)).double()


def convnet(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, CLASSES)).double()


def data(batch_size, shape=(5,), seed=1):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(batch_size, *shape, generator=generator, dtype=torch.float32)   # the engine casts them
    targets = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    return inputs, targets


def reference_step(model, inputs, targets, optimizer_class=torch.optim.SGD, steps=1, **options):
    """The hand-written full-batch loop every plan must reproduce."""
    model = copy.deepcopy(model)
    optimizer = optimizer_class(model.parameters(), **options)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs.double()), targets)
        loss.backward()
        optimizer.step()
    return model, loss.item()


def engine_step(model, plan, inputs, targets, optimizer_class=torch.optim.SGD, steps=1, **options):
    model = copy.deepcopy(model)
    with build_engine(model, plan) as engine:
        optimizer = optimizer_class(engine.parameters(), **options)
        results = [engine.train_step([inputs], [targets], F.cross_entropy, optimizer) for _ in range(steps)]
        replicas = getattr(engine, 'replicas', [engine.module])
    return engine.module, float(results[-1].loss), replicas


def assert_same_parameters(actual, expected):
    for (name, a), b in zip(actual.named_parameters(), expected.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13, msg=f'parameter {name} differs')


MICROBATCH = {'off': lambda n: None, 'dividing': lambda n: {12: 4, 7: 1, 2: 1}[n],
              'not dividing': lambda n: {12: 5, 7: 3, 2: 3}[n]}


@pytest.mark.parametrize('num_devices', [1, 2, 3, 4])
@pytest.mark.parametrize('microbatch', list(MICROBATCH))
@pytest.mark.parametrize('batch_size', [12, 7, 2])
def test_one_step_equals_the_full_batch_step(num_devices, microbatch, batch_size):
    model, (inputs, targets) = mlp(), data(batch_size)
    expected, expected_loss = reference_step(model, inputs, targets, lr=0.5, momentum=0.9)
    plan = make_plan([f'CPU:{i}' for i in range(num_devices)], MICROBATCH[microbatch](batch_size), num_gpus=0)
    actual, loss, replicas = engine_step(model, plan, inputs, targets, lr=0.5, momentum=0.9)
    assert loss == pytest.approx(expected_loss, rel=1e-10)
    assert_same_parameters(actual, expected)
    for replica in replicas:
        assert_same_parameters(replica, expected)


@pytest.mark.parametrize('device, microbatch', [('CPU:0', 3), (['CPU:0', 'CPU:1', 'CPU:2'], None),
                                                ('CPU:0x4', 3), (['CPU:0', 'CPU:1'], 4)])
def test_several_adam_steps_on_a_conv_net_match(device, microbatch):
    model, (inputs, targets) = convnet(), data(10, (2, 6, 6))
    expected, expected_loss = reference_step(model, inputs, targets, torch.optim.Adam, steps=3, lr=0.01)
    plan = make_plan(device, microbatch, num_gpus=0)
    actual, loss, _ = engine_step(model, plan, inputs, targets, torch.optim.Adam, steps=3, lr=0.01)
    assert loss == pytest.approx(expected_loss, rel=1e-10)
    assert_same_parameters(actual, expected)


def test_weighted_devices_give_the_same_step():
    model, (inputs, targets) = mlp(), data(11)
    expected, _ = reference_step(model, inputs, targets, lr=0.5)
    plan = make_plan(['CPU:0', 'CPU:1', 'CPU:2'], 4, device_weights=[1, 5, 2], num_gpus=0)
    actual, _, _ = engine_step(model, plan, inputs, targets, lr=0.5)
    assert_same_parameters(actual, expected)


@pytest.mark.parametrize('device, microbatch', [('CPU:0', None), ('CPU:0', 3), (['CPU:0', 'CPU:1', 'CPU:2'], 4)])
def test_outputs_and_predictions_come_back_in_batch_order(device, microbatch):
    model, (inputs, _) = mlp(), data(10)
    targets = torch.arange(10) % CLASSES
    expected = model(inputs.double()).detach()
    with build_engine(copy.deepcopy(model), make_plan(device, microbatch, num_gpus=0)) as engine:
        torch.testing.assert_close(engine.predict([inputs]), expected, rtol=1e-12, atol=1e-14)
        assert not engine.module.training
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        result = engine.train_step([inputs], [targets], F.cross_entropy, optimizer, return_outputs=True)
        torch.testing.assert_close(result.outputs, expected, rtol=1e-12, atol=1e-14)
        assert engine.module.training


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 2), nn.Linear(4, 2)

    def forward(self, x, y):
        return self.a(x) + self.b(y)


def test_several_inputs_and_targets_keep_their_dtypes():
    torch.manual_seed(0)
    model = TwoInputs().double()
    x, y = torch.randn(7, 3), torch.randn(7, 4)
    labels, scale = torch.randint(0, 2, (7,)), torch.rand(7)
    seen = []

    def loss_fn(outputs, labels, scale):
        seen.append((outputs.dtype, labels.dtype, scale.dtype))
        return (F.cross_entropy(outputs, labels, reduction='none') * scale).mean()

    with build_engine(model, make_plan(['CPU:0', 'CPU:1'], 2, num_gpus=0)) as engine:
        engine.train_step((x, y), (labels, scale), loss_fn, torch.optim.SGD(engine.parameters(), lr=0.1))
    assert set(seen) == {(torch.float64, torch.int64, torch.float64)} and len(seen) == 7  # chunks 2, 2, 2, 1 split over two replicas


def test_the_engine_kind_follows_the_plan_and_the_primary_holds_the_truth():
    model = mlp()
    single = build_engine(model, make_plan(num_gpus=0))
    assert isinstance(single, SingleEngine) and single.module is model
    with build_engine(mlp(), make_plan(['CPU:0', 'CPU:1'], num_gpus=0)) as replicas:
        assert isinstance(replicas, ReplicaEngine)
        assert list(replicas.parameters()) == list(replicas.module.parameters())
        assert replicas.state_dict().keys() == replicas.module.state_dict().keys()
        assert replicas.replicas[1] is not replicas.module
        assert 'ReplicaEngine(DevicePlan: 2 replicas' in repr(replicas)


def test_sync_copies_loaded_weights_to_the_replicas():
    inputs, _ = data(6)
    with build_engine(mlp(), make_plan(['CPU:0', 'CPU:1', 'CPU:2'], num_gpus=0)) as engine:
        engine.module.load_state_dict(mlp(seed=5).state_dict())
        engine.sync()
        torch.testing.assert_close(engine.predict(inputs), mlp(seed=5)(inputs.double()).detach())


def test_close_stops_the_worker_threads_and_later_steps_fail_clearly():
    # only this engine's threads: engines other tests left alive may have threads with the same names
    engine = build_engine(mlp(), make_plan(['CPU:0', 'CPU:1', 'CPU:2'], num_gpus=0))
    workers = engine._workers.threads
    assert len(workers) == 2 and all(t.is_alive() and t.daemon for t in workers)
    assert all(t.name.startswith('flowpipe-replica') for t in workers)
    engine.close()
    engine.close()
    assert not any(t.is_alive() for t in workers)
    with pytest.raises(RuntimeError, match='after close'):
        engine.predict(data(4)[0])


def test_an_error_on_a_replica_thread_reaches_the_caller():
    def loss_fn(outputs, targets):
        if threading.current_thread().name.startswith('flowpipe-replica'):
            raise ArithmeticError('replica failed')
        return F.cross_entropy(outputs, targets)

    inputs, targets = data(6)
    with build_engine(mlp(), make_plan(['CPU:0', 'CPU:1'], num_gpus=0)) as engine:
        failed = engine._workers.threads
        with pytest.raises(ArithmeticError, match='replica failed'):
            engine.train_step([inputs], [targets], loss_fn, torch.optim.SGD(engine.parameters(), lr=0.1))
        assert not any(thread.is_alive() for thread in failed)       # a failed step leaves no worker behind
        assert engine.predict([inputs]).shape == (6, CLASSES)         # the next step starts new ones
        assert all(thread.is_alive() for thread in engine._workers.threads)


@pytest.mark.parametrize('device', ['CPU:0', ['CPU:0', 'CPU:1']])
def test_bad_batches_are_rejected(device):
    with build_engine(mlp(), make_plan(device, num_gpus=0)) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        with pytest.raises(ValueError, match=r'one length.*\[4, 3\]'):
            engine.train_step([torch.zeros(4, 5)], [torch.zeros(3, dtype=torch.long)], F.cross_entropy, optimizer)
        with pytest.raises(ValueError, match='non-empty batch'):
            engine.predict([torch.zeros(0, 5)])
        with pytest.raises(ValueError, match='at least one input'):
            engine.predict([])
        with pytest.raises(TypeError, match='sequence of batch-first tensors'):
            engine.predict({'x': torch.zeros(2, 5)})


def test_build_engine_checks_its_arguments():
    with pytest.raises(TypeError, match='Expected an nn.Module'):
        build_engine(lambda x: x, make_plan(num_gpus=0))
    with pytest.raises(TypeError, match='Expected a DevicePlan'):
        build_engine(mlp(), {'device': 'cpu'})


def test_amp_on_cpu_leaves_a_float64_model_exact():
    # bfloat16 autocast on a CPU casts float32 operands only: a float64 model computes as without amp
    model, (inputs, targets) = mlp(), data(6)
    expected, _ = reference_step(model, inputs, targets, lr=0.5)
    actual, _, _ = engine_step(model, make_plan(amp=True, num_gpus=0), inputs, targets, lr=0.5)
    assert_same_parameters(actual, expected)


def dropped_engine_threads(train: bool) -> list[threading.Thread]:
    """Build a replica engine (optionally run a training step and a prediction), drop it, return its threads."""
    engine = build_engine(mlp(), make_plan(['CPU:0', 'CPU:1', 'CPU:2'], 2, num_gpus=0))
    workers = list(engine._workers.threads)
    assert len(workers) == 2 and all(t.is_alive() for t in workers)
    if train:
        inputs, targets = data(6)
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer, return_outputs=True)
        engine.predict([inputs])
    return workers


@pytest.mark.parametrize('train', [False, True], ids=['fresh', 'after a train step'])
def test_dropping_an_engine_without_close_stops_its_threads(train):
    workers = dropped_engine_threads(train)
    gc.collect()
    for thread in workers:
        thread.join(timeout=900)
    assert not any(t.is_alive() for t in workers), 'the dropped engine was not collected: its threads live on'


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(5, 2), nn.Linear(5, 1)

    def forward(self, x):
        return self.a(x), {'score': self.b(x)}


def test_structured_outputs_are_concatenated_piece_by_piece():
    torch.manual_seed(0)
    model = TwoOutputs().double()
    inputs = torch.randn(9, 5)
    first, second = model(inputs.double())
    with build_engine(model, make_plan(['CPU:0', 'CPU:1'], 4, num_gpus=0)) as engine:
        predicted_first, predicted_second = engine.predict([inputs])
    torch.testing.assert_close(predicted_first, first.detach())
    torch.testing.assert_close(predicted_second['score'], second['score'].detach())


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize('microbatch', [None, 3])
def test_replicas_on_one_gpu_match_the_full_batch_step(microbatch):
    model, (inputs, targets) = mlp(), data(10)
    expected, expected_loss = reference_step(model, inputs, targets, lr=0.5)
    actual, loss, _ = engine_step(model, make_plan('GPU:0x2', microbatch), inputs.cuda(), targets.cuda(), lr=0.5)
    assert loss == pytest.approx(expected_loss, rel=1e-10)
    assert_same_parameters(actual.cpu(), expected)


@pytest.mark.gpu
@needs_cuda
def test_amp_on_gpu_trains_with_one_scaler_step_per_batch():
    model, (inputs, targets) = mlp(), data(16)
    model = model.float()
    with build_engine(model, make_plan('GPU:0x2', 4, amp=True)) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        before = [p.detach().clone() for p in engine.parameters()]
        for _ in range(20):                 # the scaler may skip the first steps while it finds its scale
            result = engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        assert engine.precision.scaler is not None and result.loss > 0
        assert any(not torch.equal(a, b) for a, b in zip(before, engine.parameters()))


@pytest.mark.parametrize('device', ['CPU:0', ['CPU:0', 'CPU:1']])
def test_modes_are_switched_only_when_the_top_level_flag_differs(device):
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4), nn.Linear(4, CLASSES)).double()
    inputs, targets = data(8)
    with build_engine(model, make_plan(device, num_gpus=0)) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        replicas = getattr(engine, 'replicas', [engine.module])
        engine.predict([inputs])
        assert not any(m.training for r in replicas for m in r.modules())
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        assert all(m.training for r in replicas for m in r.modules())
        for replica in replicas:        # a user freezing BatchNorm inside a training model
            replica[1].eval()
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        assert all(r.training and not r[1].training for r in replicas)
        engine.module.eval()            # the top-level flag differs: the whole model is switched back
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        assert all(m.training for r in replicas for m in r.modules())


def clipped_reference(model, inputs, targets, max_norm, steps=3):
    """The hand-written loop with clipping: backward, clip_grad_norm_, step; returns the model and the norms."""
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    norms = []
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(inputs.double()), targets).backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)))
        optimizer.step()
    return model, norms


def clipped_engine(model, plan, inputs, targets, max_norm, steps=3):
    with build_engine(copy.deepcopy(model), plan) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.5, momentum=0.9)
        for _ in range(steps):
            engine.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_norm=max_norm)
        return engine.module, engine.replicas


MAX_NORM = 0.05


def test_clipping_on_one_device_equals_the_hand_written_loop():
    model, (inputs, targets) = mlp(), data(12)
    expected, norms = clipped_reference(model, inputs, targets, MAX_NORM)
    assert min(norms) > 2 * MAX_NORM                      # every step was clipped
    actual, _ = clipped_engine(model, make_plan('CPU:0', num_gpus=0), inputs, targets, MAX_NORM)
    assert_same_parameters(actual, expected)
    unclipped, _, _ = engine_step(model, make_plan('CPU:0', num_gpus=0), inputs, targets, steps=3, lr=0.5,
                                  momentum=0.9)
    assert not torch.allclose(unclipped[0].weight, expected[0].weight)


@pytest.mark.parametrize('device, microbatch, weights', [
    ('CPU:0', 5, None), (['CPU:0', 'CPU:1'], None, None), (['CPU:0', 'CPU:1', 'CPU:2'], 5, None),
    ('CPU:0x4', 3, None), (['CPU:0', 'CPU:1', 'CPU:2'], 4, [1, 5, 2])])
def test_clipping_uses_the_full_batch_norm_whatever_the_split(device, microbatch, weights):
    model, (inputs, targets) = mlp(), data(12)
    expected, _ = clipped_reference(model, inputs, targets, MAX_NORM)
    plan = make_plan(device, microbatch, device_weights=weights, num_gpus=0)
    actual, replicas = clipped_engine(model, plan, inputs, targets, MAX_NORM)
    for replica in replicas:
        assert_same_parameters(replica, expected)


@pytest.mark.parametrize('device, microbatch', [('CPU:0', None), (['CPU:0', 'CPU:1'], 5), ('CPU:0x3', 2)])
def test_value_clipping_then_norm_clipping_equal_the_hand_written_loop_whatever_the_split(device, microbatch):
    model, (inputs, targets) = mlp(), data(12)
    expected = copy.deepcopy(model)
    optimizer = torch.optim.SGD(expected.parameters(), lr=0.5, momentum=0.9)
    for _ in range(3):
        optimizer.zero_grad()
        F.cross_entropy(expected(inputs.double()), targets).backward()
        torch.nn.utils.clip_grad_value_(expected.parameters(), 0.01)      # value first, then the norm
        torch.nn.utils.clip_grad_norm_(expected.parameters(), 0.03)
        optimizer.step()
    with build_engine(copy.deepcopy(model), make_plan(device, microbatch, num_gpus=0)) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.5, momentum=0.9)
        for _ in range(3):
            engine.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_value=0.01,
                              clip_grad_norm=0.03)
        for replica in engine.replicas:
            assert_same_parameters(replica, expected)
    norm_only, _ = clipped_engine(model, make_plan(num_gpus=0), inputs, targets, 0.03)
    assert not torch.allclose(norm_only[0].weight, expected[0].weight)     # the value clip changed the steps


def test_a_norm_limit_above_the_gradient_norm_changes_nothing():
    model, (inputs, targets) = mlp(), data(12)
    expected, _, _ = engine_step(model, make_plan(num_gpus=0), inputs, targets, steps=2, lr=0.5, momentum=0.9)
    actual, _ = clipped_engine(model, make_plan(num_gpus=0), inputs, targets, 1e6, steps=2)
    for a, b in zip(actual.parameters(), expected.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize('value, error', [(0, ValueError), (-1.0, ValueError), (float('nan'), ValueError),
                                          ('1.0', TypeError), (True, TypeError)])
def test_bad_clip_values_are_rejected_before_the_step(value, error):
    model, (inputs, targets) = mlp(), data(4)
    engine = build_engine(model, make_plan(num_gpus=0))
    before = [p.detach().clone() for p in engine.parameters()]
    with pytest.raises(error, match=r'clip_grad_norm as a positive number .* Received: '):
        engine.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=1.0),
                          clip_grad_norm=value)
    assert all(torch.equal(a, b) for a, b in zip(before, engine.parameters()))


@pytest.mark.parametrize('value, error', [(0, ValueError), (-1.0, ValueError), ('1.0', TypeError), (True, TypeError)])
def test_bad_clip_grad_values_are_rejected_before_the_step(value, error):
    model, (inputs, targets) = mlp(), data(4)
    engine = build_engine(model, make_plan(num_gpus=0))
    before = [p.detach().clone() for p in engine.parameters()]
    with pytest.raises(error, match=r'clip_grad_value as a positive number .*, a callable grad -> grad, or None'):
        engine.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=1.0),
                          clip_grad_value=value)
    assert all(torch.equal(a, b) for a, b in zip(before, engine.parameters()))


def test_inputs_follow_the_parameters_dtype_when_the_module_is_cast_after_building():
    model = nn.Sequential(nn.Linear(5, 3)).float()
    with build_engine(model, make_plan(num_gpus=0)) as engine:
        inputs = torch.randn(4, 5, dtype=torch.float64)
        assert engine.predict([inputs]).dtype == torch.float32
        engine.module.double()
        assert engine.predict([inputs.float()]).dtype == torch.float64
        engine.train_step([inputs.float()], [torch.tensor([0, 1, 2, 0])], F.cross_entropy,
                          torch.optim.SGD(engine.parameters(), lr=0.1))
        assert engine.module[0].weight.dtype == torch.float64
    with build_engine(nn.Flatten(), make_plan(num_gpus=0)) as engine:       # no parameters: inputs keep theirs
        assert engine.compute_dtype() is None and engine.predict([inputs]).dtype == torch.float64


def test_the_steps_loss_stays_a_tensor_on_the_device_until_read(monkeypatch):
    engine = SingleEngine(mlp(), make_plan(num_gpus=0))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    inputs, targets = data(8)
    reads = []
    for name in ('__float__', 'item', '__bool__'):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, _original=original, _name=name: (
            reads.append(_name), _original(self))[1])
    result = engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
    assert reads == []                               # nothing waited for the device
    assert isinstance(result.loss, torch.Tensor) and result.loss.dim() == 0 and result.stepped
    engine.skip_nonfinite = True                     # TorchModel's default: one read, before the step
    engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
    assert reads == ['__bool__']


def test_a_non_finite_sparse_gradient_skips_the_step_too():
    torch.manual_seed(0)
    network = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Flatten(), nn.Linear(8, 3))
    engine = SingleEngine(network, make_plan(num_gpus=0))
    engine.skip_nonfinite = True
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    before = [p.detach().clone() for p in network.parameters()]

    network[0].weight.register_hook(lambda grad: grad * float('inf'))     # a finite loss, an inf sparse gradient
    inputs, targets = [torch.tensor([[1, 2], [3, 4]])], [torch.tensor([0, 1])]
    result = engine.train_step(inputs, targets, F.cross_entropy, optimizer)
    assert torch.isfinite(result.loss) and network[0].weight.grad is None        # skipped: gradients cleared
    assert not result.stepped and all(torch.equal(a, b) for a, b in zip(before, network.parameters()))


class RecordingClipEngine(ReplicaEngine):
    """Records the gradients it is asked to clip and replaces them by a constant, instead of clipping."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def clip_gradients(self, params, norm=None, value=None):
        self.calls.append(([param.grad.clone() for param in params], norm, value))
        for param in params:
            param.grad = torch.full_like(param, 0.25)


def test_an_engine_clips_the_full_batch_gradient_once_per_step_in_its_own_clip_gradients():
    model, (inputs, targets) = mlp(), data(12)
    reference = copy.deepcopy(model)
    plan = make_plan(['CPU:0', 'CPU:1'], 5, num_gpus=0)          # chunks of 5, 5, 2, each over two replicas
    with RecordingClipEngine(copy.deepcopy(model), plan, make_precision(plan)) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.5)
        for step in range(2):
            reference.zero_grad()
            F.cross_entropy(reference(inputs.double()), targets).backward()
            before = [param.detach().clone() for param in engine.parameters()]
            engine.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_norm=MAX_NORM,
                              clip_grad_value=0.01)
            assert len(engine.calls) == step + 1
            grads, norm, value = engine.calls[-1]
            assert (norm, value) == (MAX_NORM, 0.01)
            for grad, param in zip(grads, reference.parameters()):      # the whole batch's, not a piece's
                torch.testing.assert_close(grad, param.grad, rtol=1e-10, atol=1e-13)
            for replica in engine.replicas:                              # the step used the override's gradients
                for param, old in zip(replica.parameters(), before):
                    torch.testing.assert_close(param, old - 0.5 * 0.25, rtol=0, atol=1e-15)
            with torch.no_grad():
                for param, new in zip(reference.parameters(), engine.parameters()):
                    param.copy_(new)
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        assert len(engine.calls) == 2                                    # no clipping asked: not called


class RecordingStepEngine(SingleEngine):
    """Records the order of the step's hooks, runs its pieces from a fixed seed and marks its results."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events = []

    @contextlib.contextmanager
    def _context(self):
        self.events.append('enter')
        try:
            yield
        finally:
            self.events.append('exit')

    def step_context(self):
        return self._context()

    def before_step(self, inputs, targets, form=None):
        self.events.append(('before_step', len(inputs[0]), len(targets[0])))

    def step_seed(self, seed):
        self.events.append(('step_seed', seed))
        return 7

    def prepare(self, inputs, targets):
        self.events.append('prepare')
        return super().prepare(inputs, targets)

    def optimizer_step(self, optimizer, max_norm, clip_value):
        self.events.append('optimizer_step')
        super().optimizer_step(optimizer, max_norm, clip_value)

    def after_step(self, inputs, result, return_outputs):
        self.events.append(('after_step', result.stepped, return_outputs))
        return replace(result, outputs='marked')


def dropout_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 16), nn.Dropout(0.5), nn.Linear(16, CLASSES)).double()


def test_the_step_hooks_run_in_order_around_the_step_and_give_its_seed_and_result():
    inputs, targets = data(6)
    plan = make_plan(num_gpus=0)
    engine = RecordingStepEngine(dropout_mlp(), plan, make_precision(plan))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.5)
    result = engine.train_step([inputs], [targets], F.cross_entropy, optimizer, return_outputs=True, seed=3)
    assert result.outputs == 'marked'
    assert engine.events == ['enter', ('before_step', 6, 6), ('step_seed', 3), 'prepare', 'optimizer_step',
                             ('after_step', True, True), 'exit']
    expected = SingleEngine(dropout_mlp(), plan)         # the pieces drew their dropout masks from seed 7
    expected.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(expected.parameters(), lr=0.5), seed=7)
    assert_same_parameters(engine.module, expected.module)

    engine.events.clear()
    engine.skip_nonfinite = True
    result = engine.train_step([inputs * float('nan')], [targets], F.cross_entropy, optimizer)
    assert engine.events[-2:] == [('after_step', False, False), 'exit'] and 'optimizer_step' not in engine.events

    engine.events.clear()
    with pytest.raises(ValueError, match='Expected'):
        engine.train_step([inputs], [targets[:3]], F.cross_entropy, optimizer)      # the context sees the error
    assert engine.events[0] == 'enter' and engine.events[-1] == 'exit'


def test_the_distributed_engine_runs_the_base_step_through_its_hooks():
    assert 'train_step' not in vars(DistributedEngine)
    assert {'step_context', 'before_step', 'step_seed', 'after_step'} <= set(vars(DistributedEngine))


def test_the_engines_state_dicts_are_the_networks_and_the_optimizers_and_load_back():
    plan = make_plan(['CPU:0', 'CPU:1'], num_gpus=0)
    inputs, targets = data(8)
    with build_engine(mlp(), plan) as engine, build_engine(mlp(seed=1), plan) as other:
        optimizer = torch.optim.Adam(engine.parameters(), lr=0.1)
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        # copies, as a saved file holds: torch's state dicts refer to the live tensors
        state, optimizer_state = copy.deepcopy((engine.state_dict(), engine.optimizer_state_dict(optimizer)))
        assert list(state) == list(mlp().state_dict())                    # the network's own keys
        assert optimizer_state['state'][0]['step'] == 1
        other_optimizer = torch.optim.Adam(other.parameters(), lr=0.1)
        other.load_state_dict(state)
        other.load_optimizer_state_dict(other_optimizer, optimizer_state)
        other.sync()
        for replica in other.replicas:
            assert_same_parameters(replica, engine.module)
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        other.train_step([inputs], [targets], F.cross_entropy, other_optimizer)
        for replica in other.replicas:
            assert_same_parameters(replica, engine.module)
