"""2 gloo ranks, each on its shard of a padded batch of token sequences (rank 0's holding the all-padding item),
take the hand-written per-token step of the whole batch with ``'loss': 'ce'`` on ``(B, T, V)`` logits, under
float32 and float64, whatever the network returns."""
import numpy as np
import pytest
import torch

from flowpipe.parallel import launch

from . import sequence_loss_jobs as jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]


def test_two_ranks_take_the_per_token_step_of_the_whole_batch():
    want, want_loss = jobs.by_hand()
    tolerance = 1e-12 if torch.get_default_dtype() == torch.float64 else 1e-6
    for rank in launch(jobs.rank_steps, 2, timeout=300):
        for returns, (got, loss) in rank.items():
            for a, b in zip(got, want):
                np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance, err_msg=returns)
            assert loss == pytest.approx(want_loss, rel=1e-6)
