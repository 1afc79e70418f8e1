"""build_engine: the plan's engine kind, chosen once by make_plan, picks the class from one registry."""
import contextlib
import dataclasses
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import ENGINES, Precision, build_engine, make_plan
from flowpipe.parallel.engines import ModelParallelEngine, ReplicaEngine, SingleEngine

CPUS = ['CPU:0', 'CPU:1', 'CPU:2']
PARTS = {'initial_block': 'CPU:0', 'body': 'CPU:1', 'head': 'CPU:1'}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.initial_block, self.body, self.head = nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(self.initial_block(x)))


@pytest.mark.parametrize('flags, kind', [
    ({}, 'single'),
    ({'device': 'CPU:1', 'microbatch': 4}, 'single'),
    ({'device': ['CPU:0']}, 'single'),
    ({'device': 'CPU:*'}, 'single'),
    ({'amp': True}, 'single'),
    ({'device': ['CPU:0', 'CPU:1']}, 'replicas'),
    ({'device': 'CPU:0x2', 'microbatch': 3}, 'replicas'),
    ({'device': CPUS, 'device_weights': [1, 2, 1]}, 'replicas'),
    ({'device': 'GPU:*', 'num_gpus': 2}, 'replicas'),
    ({'device': 'GPU:1', 'num_gpus': 2}, 'single'),
    ({'device_map': PARTS}, 'model_parallel'),
    ({'device_map': {'body': 'CPU:0'}}, 'model_parallel'),
    ({'device': CPUS, 'device_map': 'auto', 'microbatch': 2}, 'model_parallel'),
    ({'device': 'CPU:0', 'device_map': 'auto'}, 'model_parallel'),
])
def test_make_plan_chooses_the_engine_kind_from_the_flags(flags, kind):
    flags = {'num_gpus': 0, **flags}
    assert make_plan(**flags).engine == kind


@pytest.mark.parametrize('flags, engine_class', [
    ({}, SingleEngine), ({'device': 'CPU:0', 'microbatch': 2}, SingleEngine),
    ({'device': ['CPU:0', 'CPU:1']}, ReplicaEngine), ({'device': 'CPU:0x3'}, ReplicaEngine),
    ({'device_map': PARTS}, ModelParallelEngine), ({'device': CPUS, 'device_map': 'auto'}, ModelParallelEngine),
])
def test_build_engine_builds_the_registered_class_of_the_kind(flags, engine_class):
    plan = make_plan(num_gpus=0, **flags)
    assert ENGINES[plan.engine] is engine_class
    with build_engine(Net(), plan) as engine:
        assert type(engine) is engine_class and engine.plan is plan
        assert type(engine.precision) is Precision
        assert engine.predict([torch.randn(4, 5)]).shape == (4, 3)


def test_an_unknown_kind_is_a_clear_error():
    plan = dataclasses.replace(make_plan(num_gpus=0), engine='pipelined')
    with pytest.raises(ValueError, match=r"among the registered engine kinds \['distributed', 'model_parallel', "
                                         r"'pipeline', 'replicas', 'sharded', 'single'\]\. Received: "
                                         r"engine='pipelined'.*ENGINES"):
        build_engine(Net(), plan)


def test_a_plan_whose_kind_does_not_fit_its_devices_is_refused():
    devices = make_plan(CPUS, num_gpus=0).devices
    with pytest.raises(ValueError, match="engine fits its devices. Received: engine='single' with 3 devices"):
        dataclasses.replace(make_plan(num_gpus=0), devices=devices)
    with pytest.raises(ValueError, match="engine='replicas'.*device_map=\\(\\('body'"):
        dataclasses.replace(make_plan(CPUS, num_gpus=0), device_map=(('body', devices[0]),))
    with pytest.raises(TypeError, match='name of an engine kind'):
        dataclasses.replace(make_plan(num_gpus=0), engine=None)
    with pytest.raises(TypeError, match='engine'):
        type(make_plan(num_gpus=0))(devices[:1])            # the kind is required, by keyword


class RecordingPrecision(Precision):
    def __init__(self, calls):
        self.calls = calls

    def unscale(self, optimizer):
        self.calls.append('unscale')

    def step(self, optimizer):
        self.calls.append('step')
        optimizer.step()


class RecordingEngine(SingleEngine):
    """A new kind, added as the registry promises: one class overriding hooks, one entry in ENGINES."""

    def __init__(self, module, plan, precision):
        self.calls = []
        super().__init__(module, plan, RecordingPrecision(self.calls))

    def zero_grad(self, optimizer):
        self.calls.append('zero_grad')
        super().zero_grad(optimizer)

    @contextlib.contextmanager
    def backward_sync(self, last):
        self.calls.append(f'piece last={last}')
        yield

    def reduce_gradients(self, active):
        self.calls.append(f'reduce {active}')

    def broadcast(self, active):
        self.calls.append(f'broadcast {active}')


def test_a_registered_kind_runs_the_one_loop_through_its_hooks_in_order(monkeypatch):
    monkeypatch.setitem(ENGINES, 'recording', RecordingEngine)
    plan = dataclasses.replace(make_plan('CPU:0', microbatch=4, num_gpus=0), engine='recording')
    engine = build_engine(Net(), plan)
    assert type(engine) is RecordingEngine
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    inputs, targets = torch.randn(10, 5), torch.randint(0, 3, (10,))
    engine.train_step([inputs], [targets], F.cross_entropy, optimizer, clip_grad_norm=1.0)
    assert engine.calls == ['zero_grad', 'piece last=False', 'piece last=False', 'piece last=True',
                            'reduce (0,)', 'unscale', 'step', 'broadcast (0,)']
    engine.calls.clear()
    engine.train_step([inputs], [targets], F.cross_entropy, optimizer)          # no clipping: no unscale
    assert engine.calls[-3:] == ['reduce (0,)', 'step', 'broadcast (0,)']


class CountingReplicas(ReplicaEngine):
    def __init__(self, module, plan, precision):
        super().__init__(module, plan, precision)
        self.lasts = []

    def backward_sync(self, last):
        self.lasts.append(last)         # list.append is atomic: replica threads may append concurrently
        return contextlib.nullcontext()


def test_each_replica_syncs_on_its_own_last_piece(monkeypatch):
    monkeypatch.setitem(ENGINES, 'replicas', CountingReplicas)
    with build_engine(Net(), make_plan(CPUS, microbatch=6, num_gpus=0)) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        engine.train_step([torch.randn(14, 5)], [torch.randint(0, 3, (14,))], F.cross_entropy, optimizer)
    # chunks 6, 6, 2 over three replicas: shards [2, 2, 2], [2, 2, 2], [1, 1] -> 8 pieces, 3 replicas
    assert len(engine.lasts) == 8 and engine.lasts.count(True) == 3


def test_amp_on_cpu_builds_bfloat16_autocast_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        engine = build_engine(Net(), make_plan(amp=True, num_gpus=0))
    assert engine.precision.dtype == torch.bfloat16 and engine.precision.scaler is None
