"""Two ranks sharing one GPU: DDP and sharding over gloo (whose collectives take CUDA tensors) equal one process on
the whole batch; NCCL refuses two ranks on one GPU, and flowpipe says so before the group starts. Skipped where
CUDA is absent."""
import numpy as np
import pytest

from flowpipe import LaunchError
from flowpipe.parallel import launch

from . import dist_jobs, sharded_jobs

pytestmark = pytest.mark.gpu

GLOO = {'FLOWPIPE_DIST_BACKEND': 'gloo'}


def assert_ranks_equal_one_process(ranks, alone, names):
    for rank, result in enumerate(ranks):
        for name in names:
            plan = result[name]['plan']
            assert f'rank {rank} of 2' in plan and 'backend gloo' in plan and 'cuda:0' in plan
            for got, want in zip(result[name]['params'], alone[name]['params']):
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_ddp_over_gloo_with_two_ranks_on_one_gpu_equals_one_gpu_on_the_whole_batch():
    runs = [('whole', {'batch_size': 7, 'device': 'GPU:0'}), ('micro', {'batch_size': 6, 'microbatch': 2,
                                                                         'device': 'GPU:0'})]
    ranks = launch(dist_jobs.scenarios, 2, args=(runs,), env=GLOO, timeout=300)
    assert_ranks_equal_one_process(ranks, dist_jobs.scenarios(runs), [name for name, _ in runs])


def test_sharding_over_gloo_with_two_ranks_on_one_gpu_equals_one_gpu_on_the_whole_batch():
    runs = [(name, {'batch_size': 7, 'sharding': name, 'overrides': {'device': 'GPU:0'}})
            for name in ('full', 'grad_op')]
    alone = sharded_jobs.scenarios([(name, {**kwargs, 'sharding': None}) for name, kwargs in runs])
    ranks = launch(sharded_jobs.scenarios, 2, args=(runs,), env=GLOO, timeout=300)
    assert_ranks_equal_one_process(ranks, alone, [name for name, _ in runs])


def test_nccl_refuses_two_ranks_on_one_gpu_before_the_group_starts():
    runs = [('whole', {'batch_size': 7, 'device': 'GPU:0'})]
    with pytest.raises(LaunchError, match='Expected a GPU of its own for each rank under NCCL'):
        launch(dist_jobs.scenarios, 2, args=(runs,), env={'FLOWPIPE_DIST_BACKEND': 'nccl'}, timeout=120)
