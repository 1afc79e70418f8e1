"""A non-finite loss in a distributed job: every rank skips the same step, also the ranks whose shard is clean."""
import numpy as np
import pytest
import torch

from flowpipe.models.torch import TorchModel
from flowpipe.parallel import distributed, launch

from . import dist_jobs

# several processes each: run in CI (CI set) or with FLOWPIPE_SLOW=1, as the README says
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]


def skip_poisoned_batch():
    """Three steps on a global batch of 6, the second with an inf in the last item (rank 1's shard of 2 ranks);
    the skipped count and the parameters."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, dist_jobs.N_FEATURES)), rng.integers(0, dist_jobs.N_CLASSES, 6)
    poisoned = x.copy()
    poisoned[-1, 0] = np.inf
    world, rank = distributed.world_size(), distributed.rank()
    shard = slice(rank * 6 // world, (rank + 1) * 6 // world)
    with TorchModel(dist_jobs.config()) as model:
        for inputs in (x, poisoned, x):
            model.train(x=inputs[shard], y=y[shard], seed=1)
        return model.skipped_steps, [p.detach().numpy().copy() for p in model.model.parameters()]


def test_every_rank_skips_the_step_one_rank_saw_a_non_finite_loss_in():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        skipped, params = skip_poisoned_batch()
    assert skipped == 1 and all(np.isfinite(p).all() for p in params)
    for rank_skipped, rank_params in launch(skip_poisoned_batch, 2, timeout=900):
        assert rank_skipped == 1
        for mine, alone in zip(rank_params, params):
            np.testing.assert_allclose(mine, alone, rtol=1e-12)
    torch.manual_seed(0)
