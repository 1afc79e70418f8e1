"""tp 2 on 2 gloo processes: an MLP split by the 'auto' plan trains what one process trains (Adam, a summed loss,
clipping by the norm over the sharded gradients); each rank holds half of the split layers."""
import numpy as np
import pytest

from flowpipe.parallel import launch

from . import tensor_plan_jobs

# several processes: CI or FLOWPIPE_SLOW=1; float64 to 1e-10, float32 to 1e-5 (the sums' order differs)
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 300


def test_tp_two_trains_one_process_s_model(default_dtype):
    import torch
    tolerance = 1e-10 if torch.get_default_dtype() == torch.float64 else 1e-5
    reference = tensor_plan_jobs.train()
    for rank in launch(tensor_plan_jobs.rank_train, 2, timeout=TIMEOUT):
        assert rank['local'] == [(4, 5), (4,), (3, 4), (3,), (3, 3), (3,), (2, 3), (2,)]
        for got, expected in zip(rank['params'], reference['params']):
            assert np.max(np.abs(got - expected)) <= tolerance * np.max(np.abs(expected))
        np.testing.assert_allclose(rank['losses'], reference['losses'], rtol=tolerance)
