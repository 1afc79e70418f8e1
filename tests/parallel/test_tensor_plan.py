"""Tensor-parallel plans: resolving 'auto', a network's own plan and a mapping; the errors for bad plans."""
import pytest
from torch import nn

from flowpipe.parallel.tensor_plan import parallel_styles, resolve_tensor_plan


def mlp(*layers):
    return nn.Sequential(*layers)


def test_auto_pairs_linear_layers_colwise_then_rowwise():
    net = mlp(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 4), nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 2), nn.Linear(2, 5))
    assert resolve_tensor_plan(net, 'auto', 2) == {'0': 'colwise', '2': 'rowwise', '3': 'colwise', '5': 'rowwise'}


def test_auto_refuses_with_the_reason():
    with pytest.raises(ValueError, match=r"'1' \(LayerNorm\) stands after '0'"):
        resolve_tensor_plan(mlp(nn.Linear(3, 8), nn.LayerNorm(8), nn.Linear(8, 2)), 'auto', 2)
    with pytest.raises(ValueError, match='dropout on a split activation'):
        resolve_tensor_plan(mlp(nn.Linear(3, 8), nn.Dropout(0.1), nn.Linear(8, 2)), 'auto', 2)
    with pytest.raises(ValueError, match='7 output features, not divisible by 2'):
        resolve_tensor_plan(mlp(nn.Linear(3, 7), nn.Linear(7, 2)), 'auto', 2)


def test_a_networks_own_plan_is_read_when_the_config_names_none():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = nn.Linear(3, 8), nn.Linear(8, 3)

        def tensor_parallel_plan(self):
            return {'up': 'colwise', 'down': 'rowwise'}

    assert resolve_tensor_plan(Net(), None, 4) == {'up': 'colwise', 'down': 'rowwise'}
    with pytest.raises(ValueError, match='tensor_parallel_plan'):
        resolve_tensor_plan(mlp(nn.Linear(3, 8)), None, 2)


def test_bad_plans_are_refused():
    net = mlp(nn.Embedding(10, 6), nn.Linear(6, 9), nn.LayerNorm(9))
    with pytest.raises(ValueError, match=r"Expected child paths.*Received: 'head'"):
        resolve_tensor_plan(net, {'head': 'colwise'}, 2)
    with pytest.raises(ValueError, match='width 9'):
        resolve_tensor_plan(net, {'1': 'colwise'}, 2)
    with pytest.raises(ValueError, match="Received: 'diagonal'"):
        resolve_tensor_plan(net, {'1': 'diagonal'}, 3)
    with pytest.raises(TypeError, match="'2' is LayerNorm"):
        resolve_tensor_plan(net, {'2': 'rowwise'}, 3)
    with pytest.raises(ValueError, match='positive integer'):
        resolve_tensor_plan(net, 'auto', 0)
    assert resolve_tensor_plan(net, {'0': 'vocab', '1': 'colwise', '2': 'sequence'}, 1) == {
        '0': 'vocab', '1': 'colwise', '2': 'sequence'}


def test_parallel_styles_are_dtensors():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel
    styles = parallel_styles({'a': 'colwise', 'b': 'rowwise', 'c': 'sequence', 'd': 'vocab'})
    assert [type(s) for s in styles.values()] == [ColwiseParallel, RowwiseParallel, SequenceParallel, RowwiseParallel]


def test_the_mesh_lays_tp_innermost_on_adjacent_ranks():
    from flowpipe.parallel.distributed import World
    from flowpipe.parallel.mesh import make_mesh
    mesh = make_mesh(World(5, 8), pipeline=2, tensor=2)
    assert (mesh.pp, mesh.dp, mesh.tp, mesh.group('tp'), mesh.data_rank, mesh.data_size) == (2, 2, 2, (4, 5), 0, 2)
    sharded = make_mesh(World(3, 4), shard_shape=(2,), tensor=2)
    assert (sharded.shard, sharded.tp, sharded.group('tp'), sharded.group('shard')) == (2, 2, (2, 3), (1, 3))
    with pytest.raises(ValueError, match='tensor_parallel=4, pipeline=1 in a job of 6 processes'):
        make_mesh(World(0, 6), tensor=4)
