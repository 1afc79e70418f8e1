"""A hand-made Context with a tiny fake batch and dataset for expression tests."""
from types import SimpleNamespace

import numpy as np
import pytest

from flowpipe.config import Config
from flowpipe.expr import Context


class FakeBatch(SimpleNamespace):
    """Stands in for a Batch: components as attributes, a size and a components tuple."""
    components = ('images', 'labels')


@pytest.fixture
def ctx():
    batch = FakeBatch(images=np.arange(12.0).reshape(4, 3), labels=np.array([0, 1, 0, 1]), size=4)
    dataset = SimpleNamespace(num_classes=2, name='toy')
    context = Context(batch=batch, dataset=dataset, config=Config({'device': 'cpu', 'model/lr': 0.1}),
                      iteration=2, total=10, seed=np.random.SeedSequence(7))
    context.variables['loss'] = 0.5
    context.variables['history'] = []
    context.models['net'] = 'the model'
    return context
