"""The ``sharding`` flags (``flowpipe.parallel.sharding``, ``make_plan``) in one process: accepted values, clear
errors, the units chosen, and the single-process rule (the one device holds the whole model)."""
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe.models.torch import MLP
from flowpipe.models.torch.networks import MLPNetwork, SimpleCNNNetwork
from flowpipe.parallel import make_plan
from flowpipe.parallel.distributed import World
from flowpipe.parallel.engines.sharded import sharding_units, storage_bytes
from flowpipe.parallel.sharding import Sharding, make_sharding

WORLD = World(rank=1, size=4, local_rank=1, local_size=4, backend='gloo')


@pytest.mark.parametrize('mode', ['full', 'grad_op', 'hybrid', 'FULL'])
def test_a_distributed_plan_with_sharding_runs_on_the_sharded_engine(mode):
    plan = make_plan('cpu', world=WORLD, sharding=mode)
    assert plan.engine == 'sharded' and plan.sharding.mode == mode.lower()
    assert plan.sharding.reshard_after_forward is (mode != 'grad_op')
    assert make_plan('cpu', world=WORLD).engine == 'distributed'


def test_hybrid_groups_are_the_nodes_ranks_unless_sharding_group_says():
    assert make_plan('cpu', world=WORLD, sharding='hybrid').sharding.mesh_shape(4) == (1, 4)
    plan = make_plan('cpu', world=WORLD, sharding='hybrid', sharding_group=2)
    assert plan.sharding.mesh_shape(4) == (2, 2)
    assert 'mesh: 2-D, 2 replicas x 2 shards' in plan.describe()
    assert 'mesh: 1-D, 4 ranks' in make_plan('cpu', world=WORLD, sharding='full').describe()


@pytest.mark.parametrize('flags, error, words', [
    ({'sharding': 'zero3'}, ValueError, "one of ['full', 'grad_op', 'hybrid']. Received: sharding='zero3'"),
    ({'sharding': 3}, ValueError, 'Received: sharding=3'),
    ({'sharding': 'full', 'sharding_units': 'Linear'}, TypeError, 'an nn.Module class'),
    ({'sharding': 'full', 'sharding_units': 0}, ValueError, 'sharding_units=0'),
    ({'sharding': 'full', 'sharding_group': 2}, ValueError, "sharding_group only with sharding='hybrid'"),
    ({'sharding': 'hybrid', 'sharding_group': 3}, ValueError, 'divides the world size 4'),
    ({'sharding': 'hybrid', 'sharding_group': -1}, ValueError, 'sharding_group as a positive int'),
    ({'sharding': 'full', 'sharding_offload': 'yes'}, TypeError, 'sharding_offload as a bool'),
    ({'sharding_units': nn.Linear}, ValueError, "Expected sharding set for ['sharding_units']"),
])
def test_bad_sharding_flags_are_refused_naming_what_is_accepted(flags, error, words):
    with pytest.raises(error) as info:
        make_plan('cpu', world=WORLD, **flags)
    assert words in str(info.value)


def test_sharding_with_replicas_in_one_process_is_refused():
    with pytest.raises(ValueError, match='Expected sharding in a distributed job'):
        make_plan('CPU:0x2', sharding='full')


def test_in_one_process_sharding_changes_nothing_and_the_plan_says_so():
    plan = make_plan('cpu', sharding='full')
    assert plan.engine == 'single' and plan.sharding == Sharding('full')
    assert 'in one process: nothing to shard over' in plan.describe()
    config = {'inputs/x/shape': (5,), 'inputs/y/classes': 3, 'optimizer': 'Adam'}
    results = []
    for sharding in (None, 'grad_op'):
        torch.manual_seed(0)
        model = MLP({**config, 'sharding': sharding})
        x, y = np.random.default_rng(0).normal(size=(6, 5)), np.arange(6) % 3
        model.train(x=x, y=y)
        results.append([p.detach().clone() for p in model.model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*results))


def test_units_are_the_ready_networks_blocks_by_default_or_classes_or_a_parameter_count():
    mlp = MLPNetwork((5,), 3, units=(6, 4))
    assert sharding_units(mlp, None) == [mlp.body[0], mlp.body[2], mlp.head]     # Flatten, ReLUs: no parameters
    cnn = SimpleCNNNetwork((1, 8, 8), 3, filters=(4, 8))
    assert sharding_units(cnn, None)[0] is cnn.initial_block and sharding_units(cnn, None)[-1] is cnn.head
    plain = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Sequential(nn.Linear(7, 2), nn.Linear(2, 3)))
    assert sharding_units(plain, None) == [plain[0], plain[2]]
    assert sharding_units(plain, nn.Linear) == [plain[0], plain[2][0], plain[2][1]]
    # 5*7+7 = 42, 7*2+2 = 16, 2*3+3 = 9: a module is a unit when its parameters not in a unit below reach 20
    assert sharding_units(plain, 20) == [plain[0], plain[2]]


class _Residual(nn.Module):
    def __init__(self, width=4):
        super().__init__()
        self.layer = nn.Linear(width, width)

    def forward(self, x):
        return x + self.layer(x)


def test_default_units_look_inside_containers_without_a_forward():
    # FSDP2 refuses an nn.ModuleList or nn.ModuleDict (no forward of its own, so no hooks would run)
    class Listed(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
            self.parts = nn.ModuleDict({'out': nn.Linear(4, 2)})
    net = Listed()
    assert sharding_units(net, None) == [net.layers[0], net.layers[1], net.parts['out']]
    # 20 parameters per layer: the list reaches 30 with both, but is no unit; the root keeps them, as torch's
    # size-based auto-wrap policy does
    assert sharding_units(net, 30) == []
    assert sharding_units(net, 20) == [net.layers[0], net.layers[1]]


def test_default_units_take_the_stages_of_a_body_without_an_initial_block():
    net = nn.Module()
    net.body = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 4))
    net.head = nn.Linear(4, 2)
    assert sharding_units(net, None) == [net.body[0], net.body[2], net.head]


def test_a_body_stage_of_repeated_blocks_gives_one_unit_per_block():
    net = nn.Module()
    net.initial_block = nn.Linear(3, 4)
    repeated = nn.Sequential(nn.ModuleList([nn.Sequential(*[_Residual() for _ in range(3)])]))
    mixed = nn.Sequential(_Residual(), nn.Linear(4, 4))
    net.body = nn.Sequential(repeated, mixed, nn.Sequential(_Residual()))
    net.head = nn.Linear(4, 2)
    blocks = list(repeated[0][0])
    assert sharding_units(net, None) == [net.initial_block, *blocks, mixed, net.body[2], net.head]


def test_storage_bytes_count_each_storage_once():
    base = torch.zeros(10, dtype=torch.float64)
    assert storage_bytes([base[:5], base[5:], torch.zeros(3)]) == 80 + 12


def test_model_config_keys_reach_the_plan():
    model = MLP({'inputs/x/shape': (5,), 'inputs/y/classes': 3, 'sharding': 'hybrid', 'sharding_offload': True})
    assert model.plan.sharding == Sharding('hybrid', offload=True)
    with pytest.raises(ValueError, match='Received: sharding='):
        MLP({'inputs/x/shape': (5,), 'inputs/y/classes': 3, 'sharding': 'ful'})


def test_amp_under_sharding_is_bfloat16_autocast_on_a_cpu_as_without_sharding():
    from flowpipe.parallel import make_precision
    plan = make_plan('cpu', world=WORLD, sharding='full', amp=True)
    precision = make_precision(plan)
    assert plan.amp == 'bfloat16' and precision.dtype == torch.bfloat16 and precision.device_type == 'cpu'
    assert make_precision(make_plan('cpu', world=WORLD, sharding='full')).__class__.__name__ == 'Precision'


def test_make_sharding_without_a_world_keeps_the_group_unchecked_and_none_is_no_sharding():
    assert make_sharding(None) is None and make_sharding(False) is None
    assert make_sharding('hybrid', group=3) == Sharding('hybrid', group=3)      # checked once the world is known
    assert make_sharding('full', units=(nn.Linear, nn.Conv2d)).units == (nn.Linear, nn.Conv2d)


def test_tied_weights_split_over_units_are_refused_naming_them_and_the_fix():
    from flowpipe.parallel.engines.sharded import check_tied

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.mid, self.out = nn.Linear(5, 3, bias=False), nn.Linear(3, 5), nn.Linear(5, 3)
            self.out.weight = self.embed.weight
    net = Tied()
    with pytest.raises(ValueError, match=r'tied parameters embed\.weight, out\.weight in different units under '
                                         r'sharding_units=None\. Choose sharding_units'):
        check_tied(net, sharding_units(net, None), None)
    check_tied(net, sharding_units(net, 10 ** 9), 10 ** 9)        # the root holds them both
    check_tied(net, sharding_units(net, (nn.Linear,))[1:2], (nn.Linear,))     # only `mid` is a unit
