"""flowpipe.parallel.distributed outside a job (the one-process answers) and reading a job's environment."""
import datetime

import numpy as np
import pytest
import torch

from flowpipe.parallel import distributed


@pytest.fixture
def no_job(monkeypatch):
    for name in ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', distributed.TIMEOUT_VARIABLE):
        monkeypatch.delenv(name, raising=False)


def test_one_process_answers_outside_a_job(no_job):
    assert not distributed.requested() and distributed.current() is None and distributed.setup() is None
    assert (distributed.rank(), distributed.world_size(), distributed.is_main()) == (0, 1, True)
    distributed.barrier()
    assert distributed.broadcast('x') == 'x' and distributed.gather(3) == [3] and distributed.all_gather(3) == [3]
    assert distributed.reduce(np.array([1.0, 2.0]), 'max').tolist() == [1.0, 2.0]
    np.testing.assert_array_equal(distributed.gather_batches([np.arange(2), np.arange(2, 5)]), np.arange(5))


def test_a_torchrun_environment_is_a_job_before_its_group_exists(no_job, monkeypatch):
    monkeypatch.setenv('WORLD_SIZE', '4')
    monkeypatch.setenv('RANK', '3')
    monkeypatch.setenv('LOCAL_RANK', '1')
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '2')
    assert distributed.requested()
    world = distributed.current()
    assert (world.rank, world.size, world.local_rank, world.local_size, world.backend) == (3, 4, 1, 2, None)
    assert str(world) == 'rank 3 of 4 (not initialized)'
    assert distributed.rank() == 3 and not distributed.is_main()


def test_a_model_made_in_a_torchrun_environment_plans_for_the_job_before_its_network_is_built(no_job,
                                                                                            monkeypatch):
    from flowpipe.models.torch import MLP
    monkeypatch.setenv('WORLD_SIZE', '2')
    monkeypatch.setenv('RANK', '1')
    model = MLP(config={'inputs/images/classes': 3, 'initial_block/inputs': 'images', 'body/units': (8,)})
    assert model.engine is None                                 # no shape: built by the first step
    assert model.device_plan().startswith('DevicePlan: distributed, rank 1 of 2 (local rank 0), backend not '
                                          'initialized, device cpu')


def test_bad_settings_are_clear_errors(no_job, monkeypatch):
    monkeypatch.setenv('WORLD_SIZE', 'two')
    with pytest.raises(ValueError, match="WORLD_SIZE to be an integer. Received: WORLD_SIZE='two'"):
        distributed.requested()
    monkeypatch.setenv(distributed.TIMEOUT_VARIABLE, 'soon')
    with pytest.raises(ValueError, match='FLOWPIPE_DIST_TIMEOUT in seconds'):
        distributed._timeout(None)
    with pytest.raises(ValueError, match='positive seconds'):
        distributed._timeout(-1)
    with pytest.raises(ValueError, match="op among"):
        distributed.reduce(1, 'median')


def test_nccl_without_a_gpu_is_a_clear_error_before_the_group_starts(no_job, monkeypatch):
    monkeypatch.setenv('WORLD_SIZE', '2')
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 0)
    with pytest.raises(ValueError, match="Expected CUDA GPUs for the NCCL backend.*FLOWPIPE_DIST_BACKEND=gloo"):
        distributed.init('nccl')
    assert not distributed._initialized()


def test_nccl_with_more_ranks_on_the_node_than_gpus_is_a_clear_error(no_job, monkeypatch):
    monkeypatch.setenv('WORLD_SIZE', '2')
    monkeypatch.setenv('LOCAL_WORLD_SIZE', '2')
    monkeypatch.setattr(torch.cuda, 'device_count', lambda: 1)
    with pytest.raises(ValueError, match="Expected a GPU of its own for each rank under NCCL. Received: backend 'nccl' "
                                         "with 2 ranks on this node and 1 GPU.*FLOWPIPE_DIST_BACKEND=gloo"):
        distributed.init('nccl')
    assert not distributed._initialized()


def test_timeouts_in_seconds_or_timedelta(no_job, monkeypatch):
    assert distributed._timeout(None) is None
    assert distributed._timeout(2.5) == datetime.timedelta(seconds=2.5)
    monkeypatch.setenv(distributed.TIMEOUT_VARIABLE, '30')
    assert distributed._timeout(None) == datetime.timedelta(seconds=30)


def test_per_rank_batches_come_back_in_dataset_order_and_unequal_counts_are_refused():
    gathered = [[np.array([0, 1]), np.array([6])], [np.array([2, 3]), np.array([], dtype=int)],
                [np.array([4, 5]), np.array([], dtype=int)]]
    assert distributed._in_dataset_order(gathered, concat=True).tolist() == list(range(7))
    assert [len(batch) for batch in distributed._in_dataset_order(gathered, concat=False)] == [3, 3]
    with pytest.raises(ValueError, match='one value per batch on every rank'):
        distributed._in_dataset_order([[1, 2], [1]], concat=False)


def test_from_rank_0_and_collective_are_plain_outside_a_job(no_job):
    assert distributed.from_rank_0(lambda: (3, 'x')) == (3, 'x')
    with pytest.raises(RuntimeError, match='an error of the block'):       # not a collective's failure: unchanged
        with distributed.collective('a barrier'):
            raise RuntimeError('an error of the block')
