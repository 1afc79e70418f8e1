"""Property tests of dropout by item with losses that are not a mean over items (hypothesis): any batch size,
micro-batch size, device list with or without weights and padding mask gives one device's whole-batch step in
float64, with every dropout kind drawing its masks by item. A few examples in the default suite, many more in CI."""
import copy
import os
import tempfile

import pytest
import torch
from torch import nn

os.environ.setdefault('HYPOTHESIS_STORAGE_DIRECTORY', os.path.join(tempfile.gettempdir(), 'flowpipe-hypothesis'))
hypothesis = pytest.importorskip('hypothesis')
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from flowpipe.parallel import build_engine, make_plan  # noqa: E402

from .test_item_random import every_dropout_net, relative  # noqa: E402

pytestmark = pytest.mark.usefixtures('default_dtype')

EXAMPLES = 100 if os.environ.get('CI') else 8
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
LOSSES = {'mean': lambda: nn.CrossEntropyLoss(),
          'ignore_index': lambda: nn.CrossEntropyLoss(ignore_index=-100),
          'sum': lambda: nn.CrossEntropyLoss(reduction='sum'),
          'class weights': lambda: nn.CrossEntropyLoss(weight=torch.tensor([0.2, 1.0, 3.0], dtype=torch.float64))}
NET = every_dropout_net()


@st.composite
def layouts(draw):
    """A batch size, a micro-batch size (or none), 1 to 3 replicas (logical devices or one device) with or without
    weights, the items whose targets are padding, and the steps' seeds."""
    size = draw(st.integers(1, 12))
    microbatch = draw(st.one_of(st.none(), st.integers(1, 6)))
    replicas = draw(st.integers(1, 3))
    device = draw(st.sampled_from([[f'CPU:{i}' for i in range(replicas)], f'CPU:0x{replicas}']))
    weights = None if replicas == 1 else draw(
        st.one_of(st.none(), st.lists(st.integers(1, 4), min_size=replicas, max_size=replicas)))
    padding = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    seeds = draw(st.lists(st.integers(0, 2 ** 31), min_size=2, max_size=2))
    return size, microbatch, 'cpu' if device == 'CPU:0x1' else device, weights, padding, seeds


def steps(loss, device, microbatch, weights, inputs, targets, seeds):
    """Two SGD steps with momentum; the parameters after them."""
    plan = make_plan(device, microbatch=microbatch, device_weights=weights, randomness='by_item', num_gpus=0)
    with build_engine(copy.deepcopy(NET), plan) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.05, momentum=0.5)
        for seed in seeds:
            engine.train_step([inputs], [targets], LOSSES[loss](), optimizer, seed=seed)
        return [p.detach().clone() for p in engine.module.parameters()]


@SETTINGS
@given(loss=st.sampled_from(sorted(LOSSES)), layout=layouts())
def test_dropout_by_item_and_any_loss_give_one_device_s_step_on_any_layout(loss, layout):
    size, microbatch, device, weights, padding, seeds = layout
    generator = torch.Generator().manual_seed(seeds[0] % 1000)
    inputs = torch.randn(size, 6, generator=generator, dtype=torch.float64)
    targets = torch.randint(0, 3, (size,), generator=generator)
    if loss == 'ignore_index':
        targets[torch.tensor(padding, dtype=torch.bool)] = -100
        if bool((targets == -100).all()):
            targets[0] = 1                      # a whole batch of padding has no step to compare
    expected = steps(loss, 'cpu', None, None, inputs, targets, seeds)
    assert relative(steps(loss, device, microbatch, weights, inputs, targets, seeds), expected) < 1e-10
