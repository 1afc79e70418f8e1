"""Loss normalization across ranks (SPEC §3): 2 gloo processes, each on its shard of the global batch, the ranks'
normalizers added in the count exchange, give the hand-written full-batch step for every loss of the table, with
a rank whose shard is all padding; a sharded model likewise; a predicted loss is the global batch's."""
import math

import numpy as np
import pytest

from flowpipe.parallel import launch

from . import loss_cases
from .loss_cases import CASES, batch, reference_step, relative

# several processes each: CI or FLOWPIPE_SLOW=1; exact under a float32 and a float64 default dtype
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype'),
              pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss:UserWarning")]

TIMEOUT = 300
N, IGNORED = 12, list(range(6))     # over 2 ranks, rank 0's shard is all padding where the loss can ignore items
SHARDED = ['ce ignore_index', 'ce sum', 'segmentation ignore_index=255', 'masked mse (own NormalizedLoss)']


@pytest.fixture(scope='module')
def reference(default_dtype):
    return {name: reference_step(name, *batch(name, N, IGNORED)) for name in CASES}


@pytest.fixture(scope='module', params=[None, 2], ids=['whole shards', 'microbatch=2'])
def launched(request, default_dtype):
    return launch(loss_cases.rank_steps, 2, args=(list(CASES), N, IGNORED, request.param), timeout=TIMEOUT)


@pytest.mark.parametrize('name', list(CASES))
def test_two_ranks_give_the_full_batch_step_for_every_loss(launched, reference, name):
    expected, expected_loss = reference[name]
    for rank in launched:
        params, loss = rank[name]
        assert math.isfinite(loss) and loss == pytest.approx(expected_loss, rel=1e-10)
        assert relative(params, expected) < 1e-10


def test_sharded_ranks_give_the_full_batch_step(reference):
    ranks = launch(loss_cases.rank_steps, 2, args=(SHARDED, N, IGNORED, 2, 'full'), timeout=TIMEOUT)
    for rank in ranks:
        for name in SHARDED:
            params, loss = rank[name]
            expected, expected_loss = reference[name]
            assert loss == pytest.approx(expected_loss, rel=1e-10)
            assert relative(params, expected) < 1e-10, name


def test_a_predicted_loss_with_padding_is_the_global_batchs_on_every_rank():
    alone = loss_cases.predicted_losses()
    assert len(alone) == 3 and np.all(np.isfinite(alone))
    for losses in launch(loss_cases.predicted_losses, 2, timeout=TIMEOUT):
        np.testing.assert_allclose(losses, alone, rtol=1e-12)


def test_a_global_batch_with_nothing_to_count_is_named_on_every_rank():
    from flowpipe.errors import LaunchError
    with pytest.raises(LaunchError, match='Expected the normalizer of MaskedMSE to be a finite number > 0'):
        launch(loss_cases.rank_steps, 2, args=(['masked mse (own NormalizedLoss)'], N, list(range(N))),
               timeout=TIMEOUT)
