"""Speed options of a plan: checked flags, the plan's description, memory format and CPU mixed precision in steps."""
import copy
import dataclasses

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import build_engine, make_plan
from flowpipe.parallel.engines.tensors import move
from flowpipe.parallel.speed import resolve_memory_format

from .test_engines import assert_same_parameters, convnet, data, engine_step, mlp, reference_step

CPUS = ['CPU:0', 'CPU:1', 'CPU:2']


# --- flags --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('amp, device, num_gpus, expected', [
    (True, 'cpu', 0, 'bfloat16'), (True, 'GPU:0', 1, 'float16'), ('bf16', 'GPU:0', 1, 'bfloat16'),
    ('float16', 'GPU:0', 1, 'float16'), ('BFloat16', 'cpu', 0, 'bfloat16'), (False, 'cpu', 0, False),
    (None, 'GPU:0', 1, False)])
def test_amp_resolves_to_the_autocast_dtype_of_the_primary_device(amp, device, num_gpus, expected):
    assert make_plan(device, amp=amp, num_gpus=num_gpus).amp == expected


def test_float16_amp_needs_a_gpu():
    with pytest.raises(ValueError, match="CUDA device for amp='float16'.*Use amp='bfloat16'"):
        make_plan('cpu', amp='fp16', num_gpus=0)


@pytest.mark.parametrize('value, expected', [(None, None), ('contiguous', None), (torch.contiguous_format, None),
                                             ('channels_last', 'channels_last'), (torch.channels_last,
                                                                                  'channels_last'),
                                             ('auto', 'auto')])
def test_memory_format_values(value, expected):
    assert make_plan(memory_format=value, num_gpus=0).memory_format == expected


def test_bad_memory_format_and_compile_values_say_what_is_accepted():
    with pytest.raises(ValueError, match="memory_format as 'channels_last', 'auto'.*Received: memory_format='nhwc'"):
        make_plan(memory_format='nhwc', num_gpus=0)
    with pytest.raises(TypeError, match='compile as a bool or a dict of torch.compile options'):
        make_plan(compile='yes', num_gpus=0)
    with pytest.raises(ValueError, match=r"torch.compile options among .*Received: \['dynamc'\]"):
        make_plan(compile={'dynamc': True}, num_gpus=0)


def test_compile_options_are_kept_sorted_and_frozen():
    assert make_plan(num_gpus=0).compile is None and make_plan(compile=False, num_gpus=0).compile is None
    assert make_plan(compile=True, num_gpus=0).compile == ()
    plan = make_plan(compile={'mode': 'max-autotune', 'dynamic': False}, num_gpus=0)
    assert plan.compile == (('dynamic', False), ('mode', 'max-autotune'))


def test_pin_memory_is_for_gpus():
    assert make_plan(num_gpus=0).pin_memory is False
    assert make_plan('GPU:0', num_gpus=1).pin_memory is True
    assert make_plan('GPU:0', pin_memory=False, num_gpus=1).pin_memory is False
    with pytest.raises(ValueError, match='CUDA device for pin_memory=True'):
        make_plan('cpu', pin_memory=True, num_gpus=0)
    with pytest.raises(TypeError, match="pin_memory as True, False or 'auto'"):
        make_plan('cpu', pin_memory='yes', num_gpus=0)


def test_the_plan_says_which_options_are_active():
    assert 'mixed precision' not in make_plan(num_gpus=0).describe(8)
    text = make_plan(amp=True, memory_format='channels_last', compile={'dynamic': True}, num_gpus=0).describe(8)
    assert 'mixed precision: bfloat16 autocast, no loss scaling' in text
    assert 'memory format: channels_last' in text and "torch.compile(dynamic=True)" in text
    gpu = make_plan('GPU:0', amp=True, num_gpus=1).describe()
    assert 'float16 autocast + one gradient scaler stepped once per batch' in gpu


# --- memory format ------------------------------------------------------------------------------------------

class Recorder(nn.Module):
    """Wraps a network and records whether each input it gets is channels-last."""

    def __init__(self, network):
        super().__init__()
        self.network, self.seen = network, []

    def forward(self, x):
        self.seen.append(x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
        return self.network(x)


@pytest.mark.parametrize('device, microbatch', [('CPU:0', None), ('CPU:0', 3), (CPUS, None), (CPUS[:2], 4)])
def test_channels_last_steps_equal_the_default_steps(device, microbatch):
    model, (inputs, targets) = convnet(), data(10, (2, 6, 6))
    expected, expected_loss = reference_step(model, inputs, targets, torch.optim.Adam, steps=3, lr=0.01)
    plan = make_plan(device, microbatch, memory_format='channels_last', num_gpus=0)
    actual, loss, replicas = engine_step(model, plan, inputs, targets, torch.optim.Adam, steps=3, lr=0.01)
    assert loss == pytest.approx(expected_loss, rel=1e-10)
    for replica in replicas:
        assert_same_parameters(replica, expected)
        assert replica[0].weight.is_contiguous(memory_format=torch.channels_last)


def test_channels_last_converts_the_weights_once_and_every_input():
    network = Recorder(convnet())
    with build_engine(network, make_plan(CPUS[:2], 3, memory_format='channels_last', num_gpus=0)) as engine:
        assert engine.memory_format is torch.channels_last
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        inputs, targets = data(8, (2, 6, 6))
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        engine.predict([inputs])
        seen = network.seen + engine.replicas[1].seen
    assert len(seen) == 2 * 6 and all(seen)        # chunks 3, 3, 2 over two replicas: 6 pieces per call


def test_a_channels_last_input_is_not_copied_again():
    batch = torch.randn(4, 3, 5, 5).contiguous(memory_format=torch.channels_last)
    assert move(batch, torch.device('cpu'), torch.float32, None, torch.channels_last) is batch
    moved = move(torch.randn(4, 3, 5, 5, dtype=torch.float64), torch.device('cpu'), torch.float32, None,
                 torch.channels_last)
    assert moved.dtype == torch.float32 and moved.is_contiguous(memory_format=torch.channels_last)
    flat = torch.randn(4, 7)
    assert move(flat, torch.device('cpu'), torch.float32, None, torch.channels_last) is flat


def test_auto_chooses_channels_last_for_convolutions_on_a_gpu_under_mixed_precision():
    gpu = make_plan('GPU:0', amp=True, memory_format='auto', num_gpus=1)
    assert resolve_memory_format(gpu, convnet()) == 'channels_last'
    assert resolve_memory_format(gpu, mlp()) is None
    assert resolve_memory_format(dataclasses.replace(gpu, amp=False), convnet()) is None
    assert build_engine(convnet(), make_plan(memory_format='auto', num_gpus=0)).memory_format is None  # a CPU
    assert resolve_memory_format(make_plan(memory_format='channels_last', num_gpus=0), mlp()) == 'channels_last'


def test_explicit_channels_last_without_a_4d_input_is_an_error():
    engine = build_engine(mlp(), make_plan(memory_format='channels_last', num_gpus=0))
    inputs, targets = data(4)
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"4-D \(N, C, H, W\) input for memory_format='channels_last'.*\(4, 5\)"):
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
    with pytest.raises(ValueError, match="memory_format='auto' or None"):
        engine.predict([inputs])


# --- mixed precision on a CPU -------------------------------------------------------------------------------

def float_convnet():
    return convnet().float()


@pytest.mark.parametrize('device, microbatch', [('CPU:0', None), ('CPU:0', 3), (CPUS, None), (CPUS[:2], 4)])
def test_bfloat16_autocast_on_cpu_tracks_the_float32_steps(device, microbatch):
    model, (inputs, targets) = float_convnet(), data(10, (2, 6, 6))
    full = [engine_step(model, make_plan(num_gpus=0), inputs, targets, steps=n, lr=0.1)[1] for n in (1, 2, 3)]
    plan = make_plan(device, microbatch, amp=True, num_gpus=0)
    mixed = [engine_step(model, plan, inputs, targets, steps=n, lr=0.1)[1] for n in (1, 2, 3)]
    assert mixed == pytest.approx(full, rel=2e-2)
    assert mixed != full                               # it did compute in bfloat16


def test_bfloat16_autocast_splits_like_one_device():
    # the same pieces in bfloat16 whatever the devices: replicas and micro-batches change only the float order
    model, (inputs, targets) = float_convnet(), data(12, (2, 6, 6))
    one, loss_one, _ = engine_step(model, make_plan(amp=True, num_gpus=0), inputs, targets, steps=2, lr=0.1)
    many, loss_many, _ = engine_step(model, make_plan(CPUS, 4, amp=True, num_gpus=0), inputs, targets, steps=2,
                                     lr=0.1)
    assert loss_many == pytest.approx(loss_one, rel=2e-2)
    for a, b in zip(many.parameters(), one.parameters()):
        torch.testing.assert_close(a, b, rtol=0.05, atol=5e-3)


def test_bfloat16_autocast_runs_convolutions_in_bfloat16_and_keeps_float32_weights():
    with build_engine(float_convnet(), make_plan(amp=True, num_gpus=0)) as engine:
        outputs = engine.predict([data(4, (2, 6, 6))[0]])
        assert outputs.dtype == torch.bfloat16
        assert all(p.dtype == torch.float32 for p in engine.parameters())
        assert engine.precision.scaler is None and engine.precision.state() == {}


def test_the_reference_network_is_left_alone():
    model = convnet()
    before = copy.deepcopy(model.state_dict())
    engine_step(model, make_plan(amp=True, memory_format='channels_last', num_gpus=0), *data(4, (2, 6, 6)), lr=0.1)
    assert all(torch.equal(before[key], value) for key, value in model.state_dict().items())


# --- pinned memory ------------------------------------------------------------------------------------------

def test_pinned_memory_pins_each_host_tensor_once_per_batch(monkeypatch):
    # pinning needs CUDA: here the plan says so and the pin is recorded, to check which tensors are pinned when
    plan = dataclasses.replace(make_plan(CPUS, 2, num_gpus=0), pin_memory=True)
    pinned = []
    with build_engine(convnet(), plan) as engine:
        monkeypatch.setattr(engine, 'pin', lambda tensor: pinned.append(tuple(tensor.shape)) or tensor)
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        inputs, targets = data(7, (2, 6, 6))
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        assert pinned == [(7, 2, 6, 6), (7,)]           # the whole batch, before it is cut into 4 chunks
        engine.predict([inputs])
        assert pinned[2:] == [(7, 2, 6, 6)]
    with build_engine(convnet(), make_plan(CPUS, 2, num_gpus=0)) as engine:
        monkeypatch.setattr(engine, 'pin', lambda tensor: pytest.fail('pinned without a GPU'))
        engine.predict([inputs])


def test_pin_leaves_tensors_off_the_host_and_pinned_ones_alone():
    engine = build_engine(mlp(), make_plan(num_gpus=0))
    meta = torch.empty(3, device='meta')
    assert engine.pin(meta) is meta


@pytest.mark.gpu
def test_pinned_non_blocking_steps_on_a_gpu_equal_the_pageable_ones():
    model, (inputs, targets) = float_convnet(), data(10, (2, 6, 6))
    plans = [make_plan(['GPU:0x2'], 3, pin_memory=pin) for pin in (False, True)]
    results = [engine_step(model, plan, inputs, targets, steps=3, lr=0.1) for plan in plans]
    assert results[1][1] == pytest.approx(results[0][1], rel=1e-6)
    for a, b in zip(results[1][0].parameters(), results[0][0].parameters()):
        torch.testing.assert_close(a, b)
