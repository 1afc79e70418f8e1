"""Per-batch seeds of a run's seed tree, mixed only when something draws from them.

Building a ``numpy.random.SeedSequence`` costs several microseconds (it mixes its entropy pool at once), a
large share of the per-batch budget, while most batches never draw a random number. ``LazySeedSequence`` is a
``SeedSequence`` that builds the real one on first use and delegates to it, so every draw is exactly what
``SeedSequence(root, spawn_key=key)`` would give.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ['LazySeedSequence', 'batch_seed']


class LazySeedSequence(np.random.SeedSequence):
    """``SeedSequence(entropy, spawn_key=spawn_key)``, built when first used.

    Args:
        entropy: the run's root seed.
        spawn_key: the batch's position in the seed tree, e.g. ``(1, seq)``.
        given: whether the user gave the root (``run(seed=...)`` or an int ``shuffle=``) rather than the run
            drawing a fresh one; models built in a run take their weights from a given root only.
    """

    def __init__(self, entropy: int, spawn_key: tuple = (), given: bool = True):  # noqa: base built in _real()
        self._entropy_arg, self._key_arg, self._built = entropy, tuple(spawn_key), None
        self.given = given

    def _real(self) -> np.random.SeedSequence:
        if self._built is None:
            self._built = np.random.SeedSequence(self._entropy_arg, spawn_key=self._key_arg)
        return self._built

    def generate_state(self, n_words: int, dtype: Any = np.uint32) -> np.ndarray:
        """As ``SeedSequence.generate_state``."""
        return self._real().generate_state(n_words, dtype)

    def spawn(self, n_children: int) -> list:
        """As ``SeedSequence.spawn``."""
        return self._real().spawn(n_children)

    entropy = property(lambda self: self._entropy_arg)
    spawn_key = property(lambda self: self._key_arg)
    pool_size = property(lambda self: self._real().pool_size)
    pool = property(lambda self: self._real().pool)
    n_children_spawned = property(lambda self: self._real().n_children_spawned)
    state = property(lambda self: self._real().state)

    def __reduce__(self):
        return self._real().__reduce__()

    def __repr__(self) -> str:
        return repr(self._real())


def batch_seed(root: int, stage: int, seq: int, given: bool = True) -> np.random.SeedSequence:
    """The seed of batch ``seq`` of stage ``stage``: spawn key ``(1 + stage, seq)`` of the run's root."""
    return LazySeedSequence(root, (1 + stage, seq), given)
