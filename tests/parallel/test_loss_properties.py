"""Property tests of the loss normalization (hypothesis): any batch size, micro-batch size, device list with or
without weights, loss of the table and mask of padding items (pieces with nothing to count among them) gives the
hand-written full-batch step in float64. A few examples in the default suite, many more in CI (``CI`` set)."""
import math
import os
import tempfile

import pytest

# hypothesis keeps its files (a cache of the tests' constants) out of the source tree
os.environ.setdefault('HYPOTHESIS_STORAGE_DIRECTORY', os.path.join(tempfile.gettempdir(), 'flowpipe-hypothesis'))
hypothesis = pytest.importorskip('hypothesis')
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from .loss_cases import CASES, MASKED, batch, engine_step, reference_step, relative  # noqa: E402

# exact under a float32 and a float64 default dtype; KLDivLoss's 'mean' warns that it will change
pytestmark = [pytest.mark.usefixtures('default_dtype'),
              pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss:UserWarning")]

EXAMPLES = 300 if os.environ.get('CI') else 10
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def layouts(draw):
    """A batch size, a micro-batch size (or none), devices (1 to 3 logical CPU replicas, or replicas on one
    device) with or without weights, and which items are padding."""
    size = draw(st.integers(1, 14))
    microbatch = draw(st.one_of(st.none(), st.integers(1, 8)))
    replicas = draw(st.integers(1, 3))
    device = draw(st.sampled_from([[f'CPU:{i}' for i in range(replicas)], f'CPU:0x{replicas}']))
    if device == 'CPU:0x1':
        device = 'cpu'
    weights = draw(st.one_of(st.none(), st.lists(st.integers(1, 4), min_size=replicas, max_size=replicas)))
    if replicas == 1:
        weights = None
    padding = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    return size, microbatch, device, weights, [i for i, pad in enumerate(padding) if pad]


@SETTINGS
@given(name=st.sampled_from(list(CASES)), layout=layouts(), seed=st.integers(0, 2 ** 16))
def test_any_layout_gives_the_full_batch_step(name, layout, seed):
    size, microbatch, device, weights, padding = layout
    inputs, targets = batch(name, size, ignored=padding, seed=seed)
    expected, expected_loss = reference_step(name, inputs, targets)
    params, loss = engine_step(name, inputs, targets, device, microbatch, weights)
    if math.isnan(expected_loss):       # nothing to count in the whole batch: torch's mean is nan, and so is ours
        assert name in MASKED and math.isnan(loss)
        return
    assert loss == pytest.approx(expected_loss, rel=1e-10, abs=1e-300)
    assert relative(params, expected) < 1e-10
