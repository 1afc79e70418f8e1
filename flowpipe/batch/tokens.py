"""``TokenBatch``: the batches of ``flowpipe.data.TokenWindows`` and ``TokenSequences``: ``inputs`` and ``targets``
(and, where the dataset says, ``positions`` and ``attention_mask``), token ids as int64 arrays."""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Batch

__all__ = ['TokenBatch']


class TokenBatch(Batch):
    """A batch of token windows or sequences (see the module docstring); the windows of a random-window dataset
    are cut when the batch is given its seed (``batch.seed = ...``, which a run does for each batch)."""

    components = ('inputs', 'targets')
    _windows: Any = None        # the dataset that cuts this batch's windows once it has its seed

    @property
    def seed(self) -> np.random.SeedSequence:
        """The batch's ``SeedSequence``; setting it cuts the random windows of a batch made by ``TokenWindows``."""
        return Batch.seed.fget(self)

    @seed.setter
    def seed(self, value: Any) -> None:
        Batch.seed.fset(self, value)
        source, self._windows = self._windows, None
        if source is not None:
            source.fill(self, self.seed)

    def set_tokens(self, data: dict) -> None:
        """Put the components of ``data`` (``{name: array}``) in the batch, adding the names it lacks."""
        self.__dict__.update(data)
        self.components = self.components + tuple(name for name in data if name not in self.components)
