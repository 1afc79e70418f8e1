"""make_plan: every form of the flags into one frozen plan; plan.describe."""
import dataclasses

import numpy as np
import pytest

from flowpipe.errors import DeviceError
from flowpipe.parallel import make_plan

CPUS = ['CPU:0', 'CPU:1', 'CPU:2']


def test_defaults_give_a_single_device_plan():
    plan = make_plan(num_gpus=0)
    assert plan.engine == 'single' and plan.primary.name == 'cpu:0' and plan.num_replicas == 1
    assert plan.microbatch is None and plan.device_weights is None and plan.amp is False


def test_several_devices_mean_replicas():
    plan = make_plan(CPUS, microbatch=4, num_gpus=0)
    assert plan.engine == 'replicas' and plan.num_replicas == 3
    assert plan.chunk_sizes(10) == (4, 4, 2) and plan.shard_sizes(10) == (4, 3, 3)
    assert [p.replica for p in plan.pieces(10)] == [0, 1, 2, 0, 1, 2, 0, 1]


def test_the_plan_is_frozen():
    plan = make_plan(num_gpus=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.microbatch = 3


@pytest.mark.parametrize('value, expected', [(None, None), (False, None), (4, 4), (np.int64(8), 8)])
def test_microbatch_forms(value, expected):
    assert make_plan(microbatch=value, num_gpus=0).microbatch == expected


@pytest.mark.parametrize('value, error, match', [
    (0, ValueError, 'positive microbatch'), (-2, ValueError, 'positive microbatch'),
    (True, TypeError, 'microbatch as an int'), (2.5, TypeError, 'microbatch as an int'),
    ('16', TypeError, 'microbatch as an int'),
])
def test_bad_microbatch(value, error, match):
    with pytest.raises(error, match=match):
        make_plan(microbatch=value, num_gpus=0)


def test_device_weights_shape_the_shards():
    plan = make_plan(['CPU:0', 'CPU:1'], device_weights=[3, 1], num_gpus=0)
    assert plan.device_weights == (3.0, 1.0) and plan.shard_sizes(64) == (48, 16)


@pytest.mark.parametrize('weights, error, match', [
    ([1], ValueError, 'one positive weight per device'), ([1, 0], ValueError, 'one positive weight per device'),
    ([1, -1], ValueError, 'one positive weight per device'), ([1, 'a'], TypeError, 'numbers'),
    (2, TypeError, 'list of numbers'),
])
def test_bad_device_weights(weights, error, match):
    with pytest.raises(error, match=match):
        make_plan(['CPU:0', 'CPU:1'], device_weights=weights, num_gpus=0)


def test_amp_must_be_a_bool_or_a_dtype_name():
    with pytest.raises(ValueError, match="amp as True, False, 'bfloat16' or 'float16'. Received: amp='yes'"):
        make_plan(amp='yes', num_gpus=0)
    with pytest.raises(TypeError, match='amp as a bool or a dtype name'):
        make_plan(amp=1, num_gpus=0)


def test_unavailable_device_raises_device_error():
    with pytest.raises(DeviceError, match='cpu:0'):
        make_plan(['GPU:0', 'GPU:1'], num_gpus=1)


def test_device_map_gives_a_model_parallel_plan():
    plan = make_plan(device_map={'initial_block': 'CPU:0', 'body': 'CPU:1', 'head': 'cpu:1'}, num_gpus=0)
    assert plan.engine == 'model_parallel' and plan.num_replicas == 1
    assert [d.name for d in plan.devices] == ['cpu:0', 'cpu:1']
    assert [(part, dev.name) for part, dev in plan.device_map] == [
        ('initial_block', 'cpu:0'), ('body', 'cpu:1'), ('head', 'cpu:1')]


def test_auto_device_map_keeps_the_device_list():
    plan = make_plan(CPUS, device_map='AUTO', num_gpus=0)
    assert plan.device_map == 'auto' and len(plan.devices) == 3 and plan.engine == 'model_parallel'


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(device_map='balanced'), ValueError, "or 'auto'"),
    (dict(device_map=['CPU:0']), TypeError, "or 'auto'"),
    (dict(device_map={}), ValueError, 'at least one part'),
    (dict(device_map={1: 'CPU:0'}), TypeError, 'child-module names'),
    (dict(device_map={'body': 'CPU:*x2'}), ValueError, 'one device per part'),
    (dict(device_map={'body': 'CPU:0'}, device='CPU:0'), ValueError, 'device_map only'),
    (dict(device_map='auto', device=CPUS, device_weights=[1, 1, 1]), ValueError, 'device_weights only'),
])
def test_bad_device_maps(kwargs, error, match):
    with pytest.raises(error, match=match):
        make_plan(num_gpus=0, **kwargs)


def test_describe_names_devices_shards_chunks_and_the_rule():
    text = make_plan(CPUS, microbatch=16, num_gpus=0).describe(40)
    assert '3 replicas' in text and 'cpu:0, cpu:1, cpu:2' in text and '(3 on cpu)' in text
    assert 'chunk sizes [16, 16, 8]' in text
    assert 'chunk of 16 -> shards [6, 5, 5]' in text and 'chunk of 8 -> shards [3, 3, 2]' in text
    assert 'piece_size / 40' in text and 'one optimizer step per batch' in text


def test_describe_without_a_batch_size_and_for_other_modes():
    assert make_plan('GPU:0x2', num_gpus=1).describe().splitlines()[0] == (
        'DevicePlan: 2 replicas (data parallel) on cuda:0#0, cuda:0#1 (2 on cuda:0)')
    assert 'one chunk (no micro-batches)' in make_plan(num_gpus=0).describe(8)
    text = make_plan(device_map={'a': 'CPU:0', 'b': 'CPU:1'}, amp=True, num_gpus=0).describe(8)
    assert 'model parallel: a->cpu:0, b->cpu:1' in text and 'mixed precision' in text
    assert 'balanced by parameter bytes' in str(make_plan(CPUS, device_map='auto', num_gpus=0))


def test_a_device_holding_several_replicas_shows_what_they_cost():
    lines = make_plan('GPU:0x4', num_gpus=1).describe(parameter_bytes=3 * 2 ** 20, buffer_bytes=2 ** 20).splitlines()
    assert lines[1:3] == [
        '  cuda:0 holds 4 replicas: 4x parameters, gradients and buffers (4 x 7.0 MiB = 28.0 MiB),',
        '    the activations of up to 4 pieces at once (shards of one chunk); the optimizer state once, on the primary']
    plan = make_plan(['CPU:0', 'CPU:1', 'GPU:0', 'GPU:1'], num_gpus=2)
    assert plan.replicas_per_device() == {'cpu': 2, 'cuda:0': 1, 'cuda:1': 1}
    lines = plan.shared_device_memory()
    assert len(lines) == 2 and lines[0] == '  cpu holds 2 replicas: 2x parameters, gradients and buffers,'
    assert make_plan(['GPU:0', 'GPU:1'], num_gpus=2).shared_device_memory(10) == []
    assert make_plan(device_map={'a': 'CPU:0', 'b': 'CPU:1'}, num_gpus=0).replicas_per_device() == {}


def test_describe_reads_right_for_an_empty_batch_idle_replicas_one_piece_and_amp():
    text = make_plan(CPUS, microbatch=4, num_gpus=0).describe(0)
    assert 'batch 0: no items, so no pieces and no optimizer step' in text and 'piece_size / 0' not in text
    text = make_plan(CPUS, num_gpus=0).describe(2)
    assert 'shards [1, 1, 0] over cpu:0, cpu:1, cpu:2 (cpu:2 idle)' in text
    assert 'the whole batch in one piece' in make_plan(num_gpus=0).describe(8)
    assert 'bfloat16 autocast, no loss scaling' in make_plan(amp=True, num_gpus=0).describe(8)
    assert 'gradient scaler' in make_plan('GPU:0', amp=True, num_gpus=1).describe()
