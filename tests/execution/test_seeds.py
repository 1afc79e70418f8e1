"""Per-batch seeds: lazy, yet exactly the seed tree of docs/design.md."""
import pickle

import numpy as np

from flowpipe.execution.seeds import LazySeedSequence, batch_seed
from flowpipe.expr import B, R, V

from tests.pipeline.helpers import make_dataset


def test_lazy_seed_draws_like_the_real_seed_sequence():
    lazy, real = LazySeedSequence(2**100 + 7, (1, 3)), np.random.SeedSequence(2**100 + 7, spawn_key=(1, 3))
    assert isinstance(lazy, np.random.SeedSequence)
    assert np.random.default_rng(lazy).random(3).tolist() == np.random.default_rng(real).random(3).tolist()
    assert [child.spawn_key for child in lazy.spawn(2)] == [child.spawn_key for child in real.spawn(2)]
    assert lazy.entropy == real.entropy and lazy.spawn_key == real.spawn_key and lazy.pool.tolist() == real.pool.tolist()


def test_lazy_seed_pickles_as_a_plain_seed_sequence():
    restored = pickle.loads(pickle.dumps(batch_seed(5, 0, 2)))
    assert type(restored) is np.random.SeedSequence and restored.spawn_key == (1, 2) and restored.entropy == 5


def test_batch_i_draws_from_spawn_key_1_i():
    pipeline = make_dataset(6).p.init_variable('r', []).update(V('r', mode='a'), R('random'))
    pipeline.run(2, seed=42)
    expected = [np.random.default_rng(np.random.SeedSequence(42, spawn_key=(1, i))).random() for i in range(3)]
    assert pipeline.v('r') == expected


def test_batches_after_rebatch_use_the_next_stage_key():
    pipeline = make_dataset(6).p.rebatch(3).init_variable('k', []).update(V('k', mode='a'), B().seed.spawn_key)
    pipeline.run(2, seed=1)
    assert pipeline.v('k') == [(2, 0), (2, 1)]
