"""The logic behind GPU layouts, run on the CPU: mixed device lists, hook-free saves, re-placing on load, the
scaler on foreign devices, half activations reaching a full-precision part, target placement."""
import copy
import pickle

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.models.torch import TorchModel
from flowpipe.parallel import MixedPrecision, build_engine, make_plan, precision as precision_module
from flowpipe.parallel.engines import SingleEngine
from flowpipe.parallel.engines.tensors import target_devices
from flowpipe.parallel.model_parallel import MoveInputs, place_module, remove_move_hooks
from flowpipe.parallel.scaler import DeviceScaler

from .test_model_parallel import Net

pytestmark = pytest.mark.usefixtures('default_dtype')   # exact under a float32 and a float64 default dtype

CPU, META = torch.device('cpu'), torch.device('meta')


def move_hooks(module):
    return {name: sum(isinstance(hook, MoveInputs) for hook in child._forward_pre_hooks.values())
            for name, child in module.named_children()}


def test_a_list_mixing_the_cpu_and_gpus_is_planned_as_replicas():
    plan = make_plan(['CPU:0', 'GPU:0'], num_gpus=1)
    assert plan.engine == 'replicas' and [d.name for d in plan.devices] == ['cpu:0', 'cuda:0']
    assert plan.primary.device == CPU and '(1 on cpu, 1 on cuda:0)' in plan.describe()


@pytest.mark.parametrize('device, device_map, expected', [
    (['CPU:0', 'GPU:1', 'GPU:0'], None, torch.device('cuda', 1)),
    ('GPU:0x2', None, torch.device('cuda', 0)),
    (None, {'initial_block': 'CPU:0', 'body': 'GPU:1', 'head': 'CPU:0'}, torch.device('cuda', 1)),
])
def test_amp_puts_the_scale_on_the_first_gpu_even_behind_a_cpu_primary(monkeypatch, device, device_map, expected):
    monkeypatch.setattr(precision_module, 'MixedPrecision', lambda device, dtype: ('mixed', device, dtype))
    plan = make_plan(device, device_map=device_map, amp=True, num_gpus=2)
    assert precision_module.make_precision(plan) == ('mixed', expected, torch.float16)


def model_parallel_model(**config):
    torch.manual_seed(0)
    return TorchModel({'model': Net(), 'loss': 'ce', 'device_map': {'initial_block': 'CPU:0', 'head': 'CPU:1'},
                       **config})


def test_a_model_parallel_model_is_saved_without_its_placement_hooks(tmp_path):
    model = model_parallel_model()
    inputs, targets = np.ones((6, 4), 'float32'), np.array([0, 1, 2, 0, 1, 2])
    model.train(inputs, targets)
    assert move_hooks(model.model) == {'initial_block': 1, 'body': 1, 'head': 1}
    model.save(tmp_path / 'parts.pkl')
    from flowpipe.models.torch import io
    # the network is the test's own class (Net): code the file names, read as trusted
    assert move_hooks(io.read(tmp_path / 'parts.pkl', trusted=True)['module']) == {'initial_block': 0, 'body': 0, 'head': 0}
    assert move_hooks(model.model) == {'initial_block': 1, 'body': 1, 'head': 1}     # the live model keeps them

    again = TorchModel.from_file(tmp_path / 'parts.pkl', trusted=True)    # placed again, one hook per child
    assert move_hooks(again.model) == {'initial_block': 1, 'body': 1, 'head': 1}
    single = TorchModel.from_file(tmp_path / 'parts.pkl', trusted=True, device_map=None, device='cpu')
    assert move_hooks(single.model) == {'initial_block': 0, 'body': 0, 'head': 0}
    np.testing.assert_array_equal(single.predict(inputs), model.predict(inputs))
    np.testing.assert_array_equal(again.predict(inputs), model.predict(inputs))


def test_placing_a_module_again_replaces_its_hooks():
    module = Net()
    place_module(module, make_plan(device_map={'initial_block': 'CPU:0', 'head': 'CPU:1'}, num_gpus=0))
    place_module(module, make_plan(device_map={'body': 'CPU:2'}, num_gpus=0))
    assert move_hooks(module) == {'initial_block': 1, 'body': 1, 'head': 1}
    assert remove_move_hooks(module) is module and move_hooks(module) == {'initial_block': 0, 'body': 0, 'head': 0}
    assert pickle.loads(pickle.dumps(module))(torch.ones(2, 4)).shape == (2, 3)


class HalfFirst(Net):
    """A first part that hands half-precision activations on, as a GPU part under autocast does."""

    def forward(self, x):
        return self.head(self.body(self.initial_block(x).half()))


def test_half_activations_reaching_a_full_precision_part_are_cast_to_its_dtype():
    torch.manual_seed(0)
    inputs, targets = torch.randn(6, 4, dtype=torch.float32), torch.randint(0, 3, (6,))
    with pytest.raises(RuntimeError):                       # without the placement hooks: a dtype error
        F.cross_entropy(HalfFirst().float()(inputs), targets).backward()
    engine = build_engine(HalfFirst().float(), make_plan(device_map={'initial_block': 'CPU:0', 'body': 'CPU:1'}, num_gpus=0))
    result = engine.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=0.1))
    assert np.isfinite(float(result.loss)) and engine.predict([inputs]).dtype == torch.float32
    hook = MoveInputs(CPU)
    half = torch.ones(2, 8, dtype=torch.float16)
    assert hook(engine.module.body, (half,), {'mask': half})[0][0].dtype == torch.float32
    assert hook(engine.module.body.half(), (half,), {})[0][0].dtype == torch.float16     # a half part: kept
    with torch.autocast('cpu', dtype=torch.bfloat16):       # autocast on the part's device type takes them as they are
        assert hook(engine.module.head, (half,), {})[0][0].dtype == torch.float16


class AllForeign(DeviceScaler):
    """Every device counts as foreign: the blocking-copy paths run on the CPU."""

    def foreign(self, device):
        return True


def recipe(model, inputs, targets, steps):
    model, scaler = copy.deepcopy(model), torch.amp.GradScaler('cpu')
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(steps):
        optimizer.zero_grad()
        with torch.autocast('cpu', dtype=torch.float16):
            loss = F.cross_entropy(model(inputs), targets) * (float('inf') if step == 1 else 1.0)
        scaler.scale(loss.float()).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.3)
        scaler.step(optimizer)
        scaler.update()
    return model, scaler


def test_the_scaler_on_a_foreign_device_equals_the_torch_recipe():
    torch.manual_seed(0)
    model, inputs, targets = Net(), torch.randn(10, 4), torch.randint(0, 3, (10,))
    expected, scaler = recipe(model, inputs, targets, steps=4)
    precision = MixedPrecision(CPU)
    precision.scaler = AllForeign('cpu')
    engine = SingleEngine(copy.deepcopy(model), make_plan(num_gpus=0), precision)
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.5)
    for step in range(4):
        factor = float('inf') if step == 1 else 1.0
        engine.train_step([inputs], [targets], lambda o, t: F.cross_entropy(o, t) * factor, optimizer,
                          clip_grad_norm=0.3)
    for a, b in zip(engine.module.parameters(), expected.parameters()):
        assert torch.equal(a, b)
    assert precision.state() == {'scaler': scaler.state_dict()} and scaler.get_scale() == 2.0 ** 15
    restored = pickle.loads(pickle.dumps(precision.scaler))         # pickles between steps, lock and all
    assert restored.get_scale() == 2.0 ** 15 and float(restored.scale(torch.ones(()))) == 2.0 ** 15


def test_the_scale_copy_follows_updates_and_loads():
    scaler = AllForeign('cpu')
    assert float(scaler.scale(torch.ones(()))) == 2.0 ** 16
    scaler.update(4.0)
    assert float(scaler.scale(torch.ones(()))) == 4.0
    scaler.load_state_dict({**scaler.state_dict(), 'scale': 8.0})
    assert float(scaler.scale(torch.ones(()))) == 8.0
    unpickled = pickle.loads(pickle.dumps(scaler))               # no scale tensor until it is needed
    assert unpickled._scale is None and float(unpickled.scale(torch.ones(()))) == 8.0


def test_each_target_goes_to_the_device_of_its_output():
    on_cpu, on_meta = torch.ones(2), torch.ones(2, device=META)
    assert target_devices((on_cpu, on_meta), 2, CPU) == [CPU, META]
    assert target_devices({'a': on_meta, 'b': [on_cpu]}, 2, META) == [META, CPU]
    assert target_devices((on_cpu, on_meta, on_cpu), 2, CPU) == [CPU, CPU]        # counts differ: the first's
    assert target_devices(on_meta, 1, META) == [META] and target_devices(on_cpu, 0, CPU) == []


def test_a_model_prints_what_its_replicas_cost_on_a_shared_device():
    model = TorchModel({'model': nn.Linear(256, 256).float(), 'loss': 'ce', 'device': 'CPU:0x2'})
    parameter_mib = (256 * 256 + 256) * 4 / 2 ** 20
    assert f'(2 x {2 * parameter_mib:.1f} MiB = {4 * parameter_mib:.1f} MiB)' in model.device_plan()
    model.close()


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.out = nn.Linear(4, 5, bias=False)
        self.out.weight = self.embed.weight
        self.norm = nn.BatchNorm1d(4)
        self.frozen = nn.Parameter(torch.ones(2), requires_grad=False)

    def forward(self, x):
        return self.out(self.norm(self.embed(x)))


def test_the_saved_copy_is_made_on_the_cpu_keeps_tied_weights_and_leaves_the_model_alone():
    from flowpipe.models.torch.io import _cpu_copy
    module = Tied()
    place_module(module, make_plan(device_map={'embed': 'CPU:0', 'out': 'CPU:1'}, num_gpus=0))
    saved = _cpu_copy(module)
    assert saved.out.weight is saved.embed.weight and saved.embed.weight is not module.embed.weight
    assert not saved.frozen.requires_grad and isinstance(saved.frozen, nn.Parameter)
    assert torch.equal(saved.norm.running_var, module.norm.running_var) and move_hooks(saved) == dict.fromkeys(
        ['embed', 'out', 'norm'], 0)
    saved.embed.weight.data.zero_()
    assert module.embed.weight.abs().sum() > 0 and move_hooks(module) == dict.fromkeys(['embed', 'out', 'norm'], 1)
