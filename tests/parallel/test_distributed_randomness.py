"""Randomness by item across ranks: 2 gloo processes (replicated or sharding the model) with dropout train what one
process trains on the whole batch; under 'randomness': 'torch' they do not (SPEC §7)."""
import numpy as np
import pytest

from flowpipe.parallel import launch

from . import randomness_jobs

# several processes: CI or FLOWPIPE_SLOW=1; exact under a float32 and a float64 default dtype
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 300


def _rel(a, b):
    return max(float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300)) for x, y in zip(a, b))


@pytest.fixture(scope='module')
def reference(default_dtype):
    return randomness_jobs.scenarios()


@pytest.fixture(scope='module')
def launched(default_dtype):
    return launch(randomness_jobs.scenarios, 2, timeout=TIMEOUT)


@pytest.mark.parametrize('name', ['by_item', 'sharded', 'calls'])
def test_ranks_with_dropout_by_item_train_one_process_s_model(launched, reference, name):
    for result in launched:
        assert _rel(result[name]['params'], reference[name]['params']) < 1e-10
        np.testing.assert_allclose(result[name]['loss'], reference[name]['loss'], rtol=1e-10)


def test_under_torch_s_generators_the_ranks_draw_other_masks(launched, reference):
    assert all(_rel(result['torch']['params'], reference['torch']['params']) > 1e-3 for result in launched)
