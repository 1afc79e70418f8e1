"""NCCL on GPUs: the same distributed equality as on gloo, one process per GPU (needs at least 2 CUDA devices)."""
import numpy as np
import pytest
import torch

from flowpipe.parallel import launch

from . import dist_jobs

RUNS = [('whole', {'batch_size': 7, 'device': 'GPU:*'}),
        ('small', {'batch_size': 1, 'n_epochs': 1, 'device': 'GPU:*'})]      # rank 1 idle at every step


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason='needs at least 2 CUDA devices')
def test_nccl_on_two_gpus_equals_one_gpu_on_the_whole_batch():
    ranks = launch(dist_jobs.scenarios, 2, args=(RUNS,), timeout=300)
    alone = dist_jobs.scenarios([(name, {**kwargs, 'device': 'GPU:0'}) for name, kwargs in RUNS])
    for rank, result in enumerate(ranks):
        for name, _ in RUNS:
            assert f'rank {rank} of 2' in result[name]['plan'] and 'backend nccl' in result[name]['plan']
            assert f'device cuda:{rank}' in result[name]['plan']
            for got, want in zip(result[name]['params'], alone[name]['params']):
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
