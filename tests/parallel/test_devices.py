"""Device spec parsing, with a faked GPU count so multi-GPU forms are tested on a CPU machine."""
import pytest
import torch

from flowpipe.errors import DeviceError
from flowpipe.parallel import devices as devices_module
from flowpipe.parallel.devices import available_devices, parse_devices

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype


def names(spec, num_gpus):
    return [dev.name for dev in parse_devices(spec, num_gpus=num_gpus)]


@pytest.mark.parametrize('num_gpus, expected', [(0, ['cpu:0']), (2, ['cuda:0'])])
def test_none_is_the_best_single_device(num_gpus, expected):
    assert names(None, num_gpus) == expected


@pytest.mark.parametrize('spec, expected', [
    ('GPU:1', ['cuda:1']), ('gpu:1', ['cuda:1']), ('Cuda:0', ['cuda:0']), ('GPU', ['cuda:0']),
    ('cpu', ['cpu:0']), ('CPU:0', ['cpu:0']), (' cpu:3 ', ['cpu:3']),
    (torch.device('cuda', 1), ['cuda:1']), (torch.device('cpu'), ['cpu:0']), (torch.device('cuda'), ['cuda:0']),
    (['GPU:0', 'CPU:0'], ['cuda:0', 'cpu:0']), (('CPU:0', 'CPU:1', 'CPU:2'), ['cpu:0', 'cpu:1', 'cpu:2']),
])
def test_names_are_canonical_and_case_insensitive(spec, expected):
    assert names(spec, 2) == expected


def test_torch_devices_behind_logical_names():
    found = parse_devices(['CPU:0', 'CPU:1', 'GPU:1'], num_gpus=2)
    assert [dev.device for dev in found] == [torch.device('cpu'), torch.device('cpu'), torch.device('cuda', 1)]


@pytest.mark.parametrize('spec, expected', [
    ('GPU:*', [f'cuda:{i}' for i in range(12)]),
    ('GPU:[0-3]', ['cuda:0', 'cuda:1', 'cuda:2', 'cuda:3']),
    ('gpu:1*', ['cuda:1', 'cuda:10', 'cuda:11']),
    ('cuda:?', [f'cuda:{i}' for i in range(10)]),
    ('CPU:*', ['cpu:0']),
])
def test_patterns_are_anchored_globs_in_device_order(spec, expected):
    assert names(spec, 12) == expected


def test_a_plain_name_never_matches_a_longer_one():
    assert names('gpu:1', 12) == ['cuda:1']


@pytest.mark.parametrize('spec, expected', [
    ('GPU:0x4', ['cuda:0#0', 'cuda:0#1', 'cuda:0#2', 'cuda:0#3']),
    ('CPU:0x2', ['cpu:0#0', 'cpu:0#1']),
    ('GPU:*x2', ['cuda:0#0', 'cuda:0#1', 'cuda:1#0', 'cuda:1#1']),
    ('GPU:1x1', ['cuda:1']),
])
def test_multiplicity_places_several_replicas_on_one_device(spec, expected):
    found = parse_devices(spec, num_gpus=2)
    assert [dev.name for dev in found] == expected
    assert len({dev.device for dev in found}) == len({name.split('#')[0] for name in expected})


def test_gpu_count_comes_from_the_one_helper(monkeypatch):
    monkeypatch.setattr(devices_module, 'cuda_device_count', lambda: 3)
    assert [dev.name for dev in parse_devices('GPU:*')] == ['cuda:0', 'cuda:1', 'cuda:2']
    assert available_devices() == ('cuda:0', 'cuda:1', 'cuda:2', 'cpu:0')


@pytest.mark.parametrize('spec', ['GPU:2', 'GPU:1?', 'cuda:[2-5]', torch.device('cuda', 7)])
def test_unavailable_devices_raise_device_error_listing_what_exists(spec):
    with pytest.raises(DeviceError) as info:
        parse_devices(spec, num_gpus=2)
    message = str(info.value)
    assert repr(spec) in message and 'cuda:0, cuda:1' in message and 'cpu:0' in message


def test_no_gpu_is_said_plainly():
    with pytest.raises(DeviceError, match='no CUDA device is visible'):
        parse_devices('GPU:0', num_gpus=0)


@pytest.mark.parametrize('spec', ['tpu:0', 'cpu0', 'cuda:-1', torch.device('meta')])
def test_unknown_names_raise_device_error(spec):
    with pytest.raises(DeviceError, match='Available'):
        parse_devices(spec, num_gpus=1)


def test_device_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_devices('GPU:0', num_gpus=0)


@pytest.mark.parametrize('spec', [1, 1.5, True, {'a': 'cpu'}, [['cpu']]])
def test_bad_types_raise_type_error(spec):
    with pytest.raises(TypeError, match='Expected a device as a string'):
        parse_devices(spec, num_gpus=1)


def test_empty_list_is_a_value_error():
    with pytest.raises(ValueError, match='empty device list'):
        parse_devices([], num_gpus=1)


@pytest.mark.parametrize('spec', [['CPU:0', 'cpu'], ['GPU:*', 'GPU:1']])
def test_a_device_named_twice_suggests_multiplicity(spec):
    with pytest.raises(ValueError, match=r"more than once.*'GPU:0x2'"):
        parse_devices(spec, num_gpus=2)


def test_zero_multiplicity_is_rejected():
    with pytest.raises(ValueError, match='positive multiplicity'):
        parse_devices('CPU:0x0', num_gpus=0)


def test_a_cpu_pattern_is_one_replica_and_warns_how_to_get_several():
    with pytest.warns(UserWarning, match=r"'CPU:\*' matches the one CPU device.*\['CPU:0', 'CPU:1'\].*'CPU:0x2'"):
        assert names('CPU:*', 0) == ['cpu:0']
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert names('CPU:[0]', 0) == ['cpu:0'] and names('GPU:*', 2) == ['cuda:0', 'cuda:1']
        assert names(['CPU:0', 'CPU:1'], 0) == ['cpu:0', 'cpu:1']
