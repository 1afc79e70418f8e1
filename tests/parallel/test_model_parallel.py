"""Model parallel: named children on devices, 'auto' balancing, inputs moved to each part."""
import copy
import pickle

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import build_engine, make_plan
from flowpipe.parallel.model_parallel import MoveInputs, auto_device_map, balanced_groups
from flowpipe.parallel.devices import parse_devices

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.initial_block = nn.Sequential(nn.Linear(4, 8), nn.Tanh())
        self.body = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(self.initial_block(x)))


def net():
    torch.manual_seed(0)
    return Net().double()


def test_named_parts_go_to_their_devices_and_train_like_one_device():
    torch.manual_seed(1)
    inputs, targets = torch.randn(9, 4), torch.randint(0, 3, (9,))
    model, expected = net(), net()
    optimizer = torch.optim.SGD(expected.parameters(), lr=0.3)
    F.cross_entropy(expected(inputs.double()), targets).backward()
    optimizer.step()

    plan = make_plan(device_map={'initial_block': 'CPU:0', 'body': 'CPU:1', 'head': 'CPU:1'}, microbatch=4,
                     num_gpus=0)
    engine = build_engine(model, plan)
    assert {name: dev.name for name, dev in engine.placement.items()} == {
        'initial_block': 'cpu:0', 'body': 'cpu:1', 'head': 'cpu:1'}
    result = engine.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=0.3))
    for a, b in zip(engine.module.parameters(), expected.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)
    assert engine.predict([inputs]).shape == (9, 3) and result.loss > 0


def test_unlisted_children_stay_on_the_first_device():
    engine = build_engine(net(), make_plan(device_map={'body': 'CPU:1', 'head': 'CPU:2'}, num_gpus=0))
    assert {name: dev.name for name, dev in engine.placement.items()} == {
        'initial_block': 'cpu:1', 'body': 'cpu:1', 'head': 'cpu:2'}


def test_unknown_parts_list_the_children():
    plan = make_plan(device_map={'encoder': 'CPU:0', 'head': 'CPU:1'}, num_gpus=0)
    with pytest.raises(ValueError, match=r"\['initial_block', 'body', 'head'\].*\['encoder'\]"):
        build_engine(net(), plan)


def test_auto_balances_parameter_bytes_over_the_devices():
    model = nn.Sequential(nn.Linear(100, 100), nn.ReLU(), nn.Linear(100, 10), nn.Linear(10, 10), nn.Linear(100, 1))
    devices = parse_devices(['CPU:0', 'CPU:1'], num_gpus=0)
    mapping = {name: dev.name for name, dev in auto_device_map(model, devices)}
    assert mapping == {'0': 'cpu:0', '1': 'cpu:1', '2': 'cpu:1', '3': 'cpu:1', '4': 'cpu:1'}
    engine = build_engine(net(), make_plan(['CPU:0', 'CPU:1', 'CPU:2'], device_map='auto', num_gpus=0))
    assert [dev.name for dev in engine.placement.values()] == ['cpu:0', 'cpu:1', 'cpu:2']


@pytest.mark.parametrize('sizes, count, expected', [
    ([5, 5, 5, 5], 2, [0, 0, 1, 1]), ([10, 1, 1, 1, 7], 2, [0, 1, 1, 1, 1]), ([1, 1, 8], 2, [0, 0, 1]),
    ([3, 3], 4, [0, 1]), ([0, 4, 0, 4], 2, [0, 0, 1, 1]), ([7], 1, [0]),
])
def test_balanced_groups_are_contiguous_and_minimize_the_largest(sizes, count, expected):
    assert balanced_groups(sizes, count) == expected


def test_auto_needs_children():
    with pytest.raises(ValueError, match='no children'):
        build_engine(nn.Linear(2, 2), make_plan(['CPU:0', 'CPU:1'], device_map='auto', num_gpus=0))


def test_the_hook_moves_tensor_arguments_to_the_part_device():
    tensor = torch.ones(2)
    args, kwargs = MoveInputs(torch.device('meta'))(None, (tensor, [tensor], 3), {'mask': tensor})
    assert args[0].is_meta and args[1][0].is_meta and args[2] == 3 and kwargs['mask'].is_meta


def test_a_placed_module_still_pickles():
    engine = build_engine(net(), make_plan(device_map={'initial_block': 'CPU:0', 'head': 'CPU:1'}, num_gpus=0))
    restored = pickle.loads(pickle.dumps(engine.module))
    inputs = torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(restored(inputs), engine.module(inputs))
    assert copy.deepcopy(engine.module)(inputs).shape == (3, 3)


def test_the_model_plan_shows_where_auto_put_each_part():
    from flowpipe.models.torch import SimpleCNN
    model = SimpleCNN({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10,
                       'device': ['CPU:0', 'CPU:1'], 'device_map': 'auto'})
    text = model.device_plan(8)
    for name, device in model.engine.placement.items():
        assert f'{name} on {device.name}: ' in text and f'{name} on {device.name}: ' in repr(model)
    assert 'parameters' in text
