"""Sharding on GPUs: FSDP's mixed precision for ``amp`` and ``sharding_offload`` (``CPUOffloadPolicy``) on one GPU
(a one-rank NCCL group made here), and NCCL on two GPUs equal to one GPU on the whole batch."""
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from flowpipe.parallel import launch
from flowpipe.parallel.distributed import World
from flowpipe.parallel.factory import build_engine
from flowpipe.parallel.launcher import _free_port
from flowpipe.parallel.plan import make_plan
from flowpipe.parallel.sharding import Sharding

from . import sharded_jobs

pytestmark = pytest.mark.gpu


@pytest.fixture
def one_rank_group(monkeypatch):
    """A NCCL group of one rank on cuda:0, destroyed afterwards."""
    monkeypatch.setenv('MASTER_ADDR', '127.0.0.1')
    monkeypatch.setenv('MASTER_PORT', str(_free_port()))
    torch.distributed.init_process_group('nccl', rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def _train(sharding, amp, dtype, steps=3, seen=None):
    """A few Adam steps of a small network on cuda:0: the engine, the last step's result, the parameters (whole on
    one rank) on the CPU and where they are; ``seen`` collects the first layer's weight and output dtypes."""
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 3)).to(dtype)
    if seen is not None:
        network[0].register_forward_hook(lambda layer, args, out: seen.append((layer.weight.dtype, out.dtype)))
    if sharding is None:
        plan = make_plan('cuda:0', amp=amp)
    else:       # the plan of a one-rank job: make_plan plans a distributed job for two ranks or more
        plan = make_plan('cuda:0', amp=amp, sharding=sharding.mode, sharding_offload=sharding.offload)
        plan = dataclasses.replace(plan, engine='sharded', world=World(0, 1, 0, 1, 'nccl'))
    engine = build_engine(network, plan)
    optimizer = torch.optim.Adam(engine.parameters(), lr=0.05)
    x = torch.randn(8, 5, generator=torch.Generator().manual_seed(1)).to(dtype)
    y = torch.arange(8) % 3
    try:
        for _ in range(steps):
            result = engine.train_step([x], [y], nn.functional.cross_entropy, optimizer, return_outputs=True)
        local = [getattr(p, 'to_local', lambda p=p: p)() for p in engine.parameters()]    # one rank: whole
        return engine, result, [tensor.detach().cpu() for tensor in local], local
    finally:
        engine.close()


def test_offloaded_shards_live_on_the_cpu_and_train_as_one_gpu_does(one_rank_group):
    _, _, alone, _ = _train(None, False, torch.float64)
    engine, result, params, local = _train(Sharding('full', offload=True), False, torch.float64)
    assert all(tensor.device.type == 'cpu' for tensor in local)
    assert 'offload: shards and the optimizer step on the CPU' in engine.describe()
    for got, want in zip(params, alone):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10)


def test_amp_is_fsdp_mixed_precision_bfloat16_compute_float32_parameters(one_rank_group):
    seen = []
    engine, result, params, local = _train(Sharding('full'), True, torch.float32, seen=seen)
    assert engine.plan.amp == 'bfloat16' and type(engine.precision).__name__ == 'Precision'
    assert seen and set(seen) == {(torch.bfloat16, torch.bfloat16)}     # gathered weights and compute in bfloat16
    assert result.outputs.dtype == torch.float32            # outputs (and the loss) back in float32
    assert all(tensor.dtype == torch.float32 for tensor in local)
    assert np.isfinite(float(result.loss)) and all(torch.isfinite(p).all() for p in params)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason='needs at least 2 CUDA devices')
def test_nccl_sharding_on_two_gpus_equals_one_gpu_on_the_whole_batch():
    runs = [(name, {'batch_size': 7, 'sharding': name, 'overrides': {'device': 'GPU:*'}})
            for name in ('full', 'grad_op')]
    alone = sharded_jobs.scenarios([(name, {**kwargs, 'sharding': None, 'overrides': {'device': 'GPU:0'}})
                                    for name, kwargs in runs])
    for result in launch(sharded_jobs.scenarios, 2, args=(runs,), timeout=300):
        for name, _ in runs:
            assert 'backend nccl' in result[name]['plan']
            for got, want in zip(result[name]['params'], alone[name]['params']):
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
