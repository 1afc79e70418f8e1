"""The device mesh: named axes with sizes, built once from the config and the world, frozen, in the plan; the one
list of plan keys every reader of the config shares."""
import dataclasses

import pytest

from flowpipe import C, Pipeline
from flowpipe.models.torch import MLP, TorchModel
from flowpipe.models.torch.config import TOP_KEYS
from flowpipe.parallel import make_plan
from flowpipe.parallel.distributed import World
from flowpipe.parallel.mesh import Mesh, make_mesh
from flowpipe.pipeline.model_actions import PLACEMENT_KEYS
from flowpipe.pipeline.stages import pipeline_stages
from flowpipe.plan_keys import PLAN_KEYS

CONFIG = {'inputs/x/shape': (4,), 'inputs/y/classes': 3}


def test_one_process_with_logical_devices_is_the_same_mesh_on_one_rank():
    mesh = make_plan(['CPU:0', 'CPU:1', 'CPU:2']).mesh
    assert (mesh.dp, mesh.pp, mesh.processes, mesh.data_rank, mesh.data_size) == (3, 1, 1, 0, 1)
    assert make_plan('cpu').mesh == Mesh() and 'in one process' in mesh.describe()
    with pytest.raises(dataclasses.FrozenInstanceError):
        mesh.dp = 2


@pytest.mark.parametrize('rank, stage, data_rank, pipeline', [(0, 0, 0, (0, 2)), (1, 0, 1, (1, 3)),
                                                             (2, 1, 0, (0, 2)), (3, 1, 1, (1, 3))])
def test_ranks_of_one_pipeline_read_the_same_part_of_every_batch(rank, stage, data_rank, pipeline):
    plan = make_plan('cpu', 2, world=World(rank, 4, backend='gloo'), pipeline=2)
    mesh = plan.mesh
    assert plan.engine == 'pipeline' and (mesh.dp, mesh.pp) == (2, 2)
    assert (mesh.coordinate('pp'), mesh.data_rank, mesh.data_size) == (stage, data_rank, 2)
    assert mesh.group('pp') == pipeline and mesh.groups('pp') == ((0, 2), (1, 3))
    assert mesh.groups('dp') == ((0, 1), (2, 3))
    text = plan.describe(9)
    assert f'stage {stage} of 2 on rank {rank}' in text and 'mesh pp=2 x dp=2 over 4 ranks' in text
    assert f'pipeline (ranks {list(pipeline)}) computes {[5, 4][data_rank]}' in text


def test_without_a_pipeline_the_data_parts_are_the_world_and_the_plan_prints_the_mesh():
    plan = make_plan('cpu', world=World(2, 3, backend='gloo'))
    assert (plan.mesh.data_rank, plan.mesh.data_size, plan.mesh.dp) == (2, 3, 3)
    assert 'mesh dp=3 over 3 ranks; rank 2 is at dp 2, reads part 2 of 3' in plan.describe()
    hybrid = make_plan('cpu', world=World(3, 4, local_size=2, backend='gloo'), sharding='hybrid')
    assert (hybrid.mesh.dp, hybrid.mesh.shard, hybrid.mesh.data_rank, hybrid.mesh.data_size) == (2, 2, 3, 4)


def test_a_world_the_stages_do_not_divide_and_pipelines_with_sharding_or_replicas_are_refused():
    with pytest.raises(ValueError, match='world size that the number of pipeline stages divides'):
        make_mesh(World(0, 3), pipeline=2)
    with pytest.raises(ValueError, match='Expected a pipeline in a distributed job'):
        make_plan('cpu', world=World(0, 2, backend='gloo'), pipeline=2, sharding='full')
    with pytest.raises(ValueError, match='Expected a pipeline in a distributed job'):
        make_plan(['CPU:0', 'CPU:1'], pipeline=2)
    with pytest.raises(ValueError, match="pipeline_schedule among"):
        make_plan('cpu', pipeline=2, pipeline_schedule='zero-bubble')
    with pytest.raises(ValueError, match="Expected 1 distinct child names"):
        make_plan('cpu', pipeline=2, pipeline_split=['a', 'b'])
    with pytest.raises(ValueError, match="Expected 'pipeline'"):
        make_plan('cpu', pipeline_schedule='gpipe')
    with pytest.raises(ValueError, match='Expected positive axis sizes'):
        Mesh(dp=3, replicas=2)


def test_one_list_of_plan_keys_is_read_by_the_model_the_pending_model_and_the_config_check():
    assert set(PLAN_KEYS) <= set(PLACEMENT_KEYS) <= set(TOP_KEYS)
    assert {'sharding', 'sharding_units', 'sharding_group', 'sharding_offload', 'randomness', 'pipeline'} <= set(
        PLACEMENT_KEYS)


def test_a_pending_sharded_or_pipelined_model_shows_its_sharding_and_pipeline_before_the_first_batch():
    config = {**CONFIG, 'sharding': 'full', 'pipeline': C('stages')}
    pipeline = Pipeline().init_model('net', TorchModel, config=config) << {'stages': 2}
    text = pipeline.m('net').device_plan(8)
    assert "sharding 'full' asked for, in one process" in text
    assert 'pipeline of 2 stages asked for, in one process' in text


def test_the_run_reads_the_stage_count_of_its_pipelined_models_and_refuses_two_counts():
    records = (Pipeline().init_model('a', MLP, config={**CONFIG, 'pipeline': 2})
               .init_model('b', MLP, config=CONFIG)).all_records()
    assert pipeline_stages(records) == 2
    assert pipeline_stages(Pipeline().init_model('a', MLP, config=CONFIG).all_records()) is None
    static = Pipeline().init_model('static', MLP, 'c', config={**CONFIG, 'pipeline': 2}).all_records()
    assert pipeline_stages(static) == 2
    both = (Pipeline().init_model('a', MLP, config={**CONFIG, 'pipeline': 2})
            .init_model('b', MLP, config={**CONFIG, 'pipeline': 4})).all_records()
    with pytest.raises(ValueError, match='one number of pipeline stages'):
        pipeline_stages(both)


def test_the_run_reads_the_stages_of_an_imported_pipelined_model():
    source = Pipeline().init_model('static', MLP, 'a', config={**CONFIG, 'pipeline': 2})
    assert pipeline_stages(Pipeline().import_model('a', source).all_records()) == 2
    assert pipeline_stages(Pipeline().import_model('missing', source).all_records()) is None
