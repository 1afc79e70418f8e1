"""Context and Store."""
import threading
from types import SimpleNamespace

import dill
import numpy as np

from flowpipe.expr import Context, Store


def test_store_pickles_with_a_fresh_lock():
    store = Store({'a': 1}, kind='variable')
    restored = dill.loads(dill.dumps(store))
    assert restored == {'a': 1} and restored.kind == 'variable'
    assert isinstance(restored.lock, type(threading.RLock()))
    assert restored.lock is not store.lock


def test_context_random_comes_from_the_seed():
    first = Context(seed=np.random.SeedSequence(3)).random.random()
    second = Context(seed=np.random.SeedSequence(3)).random.random()
    assert first == second


def test_context_random_prefers_the_batch_generator():
    generator = np.random.default_rng(0)
    ctx = Context(batch=SimpleNamespace(random=generator), seed=np.random.SeedSequence(3))
    assert ctx.random is generator


def test_each_context_has_its_own_stores():
    assert Context().variables is not Context().variables
    assert Context().models.kind == 'model'
