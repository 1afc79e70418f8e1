"""Engines are composed from parts: a placement, a gradient synchronization and a batch part, chosen by the plan's
kind; the step recipe runs the one loop through them. A new part plugs in without a new engine class."""
import pytest
import torch
import torch.nn.functional as F

from flowpipe.parallel import launch, make_plan
from flowpipe.parallel.engines import (DistributedEngine, Engine, GradientSync, ModelParallel, OneDevice,
                                       OneProcess, Placement, Replicas, ReplicaSum, ShardedEngine, StepRecipe)
from flowpipe.parallel.engines.ddp import DdpAllReduce
from flowpipe.parallel.engines.fsdp import FsdpReduceScatter
from flowpipe.parallel.factory import build_engine

from . import engine_parts_jobs
from .test_engines import assert_same_parameters, data, mlp

TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


@pytest.mark.parametrize('devices, placement, sync', [
    ('cpu', OneDevice, GradientSync),
    (['CPU:0', 'CPU:1'], Replicas, ReplicaSum),
    ({'device_map': {'0': 'CPU:0', '2': 'CPU:1'}}, ModelParallel, GradientSync)])
def test_each_kind_of_plan_gives_its_placement_and_sync_parts(devices, placement, sync):
    plan = make_plan(**devices, num_gpus=0) if isinstance(devices, dict) else make_plan(devices, num_gpus=0)
    with build_engine(mlp(), plan) as engine:
        assert type(engine.placement) is placement and type(engine.gradient_sync) is sync
        assert type(engine.ranks) is OneProcess
        assert engine.replicas == engine.placement.replicas and engine.module is engine.placement.module


def test_ddp_and_fsdp_are_sibling_parts_not_one_engine_undoing_the_other():
    assert not issubclass(ShardedEngine, DistributedEngine) and not issubclass(DistributedEngine, ShardedEngine)
    assert not issubclass(FsdpReduceScatter, DdpAllReduce) and not issubclass(DdpAllReduce, FsdpReduceScatter)
    assert issubclass(FsdpReduceScatter, GradientSync) and issubclass(DdpAllReduce, GradientSync)


@pytest.mark.slow       # two processes each: CI or FLOWPIPE_SLOW=1
@pytest.mark.parametrize('sharding, engine, sync', [(None, 'DistributedEngine', 'DdpAllReduce'),
                                                    ('full', 'ShardedEngine', 'FsdpReduceScatter')])
def test_a_job_composes_its_engine_from_one_device_data_ranks_and_its_sync(sharding, engine, sync):
    for names in launch(engine_parts_jobs.parts, 2, args=(sharding,), timeout=TIMEOUT):
        assert names == {'engine': engine, 'placement': 'OneDevice', 'sync': sync, 'ranks': 'DataRanks',
                         'sync ranks': True}


class HalvingSync(GradientSync):
    """A new synchronization: the full-batch gradient halved before the step (a stand-in for any new rule)."""

    def __init__(self):
        self.calls = []

    def reduce(self, active):
        self.calls.append(active)
        for param in self.params:
            param.grad.mul_(0.5)

    def wrap(self, placement, plan):
        self.params = list(placement.module.parameters())
        return super().wrap(placement, plan)


def test_a_new_sync_part_plugs_into_the_engine_without_a_new_engine_class():
    inputs, targets = data(12)
    plan = make_plan('cpu', microbatch=5, num_gpus=0)
    sync = HalvingSync()
    engine = Engine(plan, OneDevice(mlp(), plan), sync)
    reference = Engine(plan, OneDevice(mlp(), plan))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.2)
    halved = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(2):
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer)
        reference.train_step([inputs], [targets], F.cross_entropy, halved)
    assert sync.calls == [(0,), (0,)]               # once per step, after the three micro-batches' backwards
    assert_same_parameters(engine.module, reference.module)     # lr 0.2 on half the gradient: lr 0.1 on all


def test_a_new_placement_part_plugs_in_too():
    class Recorded(Placement):
        def __init__(self, module, plan):
            super().__init__([module], [plan.primary.device])
            self.runs = []

        def run(self, groups, work):
            self.runs.append({replica: len(pieces) for replica, pieces in groups.items()})
            return super().run(groups, work)

    plan = make_plan('cpu', microbatch=4, num_gpus=0)
    inputs, targets = data(10)
    engine = Engine(plan, Recorded(mlp(), plan))
    expected = build_engine(mlp(), plan)
    for built in (engine, expected):
        built.train_step([inputs], [targets], F.cross_entropy, torch.optim.SGD(built.parameters(), lr=0.1))
    assert engine.placement.runs == [{0: 3}]
    assert_same_parameters(engine.module, expected.module)


def test_the_step_recipe_is_the_steps_options_checked_once():
    assert StepRecipe.of() == StepRecipe()
    assert StepRecipe.of(1, 0.5, None, True) == StepRecipe(1.0, 0.5, None, True)
    with pytest.raises(ValueError, match='clip_grad_norm'):
        StepRecipe.of(clip_grad_norm=-1)


def test_the_one_process_batch_part_gives_the_plans_pieces_by_replica():
    plan = make_plan(['CPU:0', 'CPU:1'], microbatch=3, num_gpus=0)
    groups = OneProcess().groups(plan, 8, lockstep=False)
    assert sorted(groups) == [0, 1]
    assert all(piece.replica == replica for replica, pieces in groups.items() for piece in pieces)
    listed = sorted((piece for pieces in groups.values() for piece in pieces), key=lambda piece: piece.start)
    assert listed == sorted(plan.pieces(8), key=lambda piece: piece.start)
    assert sum(piece.weight for piece in listed) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.slow       # two processes: CI or FLOWPIPE_SLOW=1
def test_a_pipeline_plan_gives_its_parts_and_steps_through_the_step_recipe():
    results = launch(engine_parts_jobs.pipeline_parts, 2, timeout=TIMEOUT)
    for result in results:
        assert {key: result[key] for key in ('engine', 'placement', 'sync', 'ranks')} == {
            'engine': 'PipelineEngine', 'placement': 'StagePlacement', 'sync': 'StageAllReduce',
            'ranks': 'OneProcess'}
        assert result['stepped'] == [True, False, True, False]     # the pipeline's, then one process's
        assert all(kept for _, kept in result['buffers kept'])     # a skipped step leaves the statistics as they were
    assert sum(result['buffers kept'][0][0] for result in results) == 1    # Tracked's, on one stage
    assert results[0]['parameters'] == []       # the clipped step: one process's on the whole network (rank 0's state)
