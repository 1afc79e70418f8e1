"""``Loss``: the loss of every batch, for ``gather_metrics('loss', loss, batch_len)`` in validation pipelines."""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Metrics, to_numpy

__all__ = ['Loss']


class Loss(Metrics):
    """The losses of the batches gathered so far and their sizes.

    ``evaluate('loss')`` (``agg='mean'``) is the mean over items, each batch's loss weighted by its length (so a
    last, smaller batch counts for what it holds); ``agg='batchwise'`` (or ``None``) lists each batch's loss.

    Args:
        loss: the batch's loss (a number or a 0-d tensor): the mean over the batch's items.
        batch_len: the number of items in the batch.
    """

    AGGREGATIONS = {'mean': lambda batches: np.sum(batches.losses * batches.lengths) / np.sum(batches.lengths),
                    'batchwise': lambda batches: batches.losses}

    def __init__(self, loss: Any, batch_len: int):
        if isinstance(batch_len, bool) or not isinstance(batch_len, (int, np.integer)) or batch_len < 1:
            raise ValueError(f"Expected batch_len as a positive int (the items in the batch). Received: "
                             f"batch_len={batch_len!r}")
        self.losses = [float(to_numpy(loss))]
        self.batch_lengths = [int(batch_len)]

    def update(self, other: Loss) -> Loss:
        """Add ``other``'s batches (``V('metrics', mode='u')`` calls this); returns ``self``."""
        if not isinstance(other, Loss):
            raise ValueError(f"Expected Loss metrics to gather. Received: {other!r}")
        self.losses.extend(other.losses)
        self.batch_lengths.extend(other.batch_lengths)
        return self

    append = update

    def copy(self) -> Loss:
        """A copy that gathers on its own."""
        new = object.__new__(Loss)
        new.losses, new.batch_lengths = list(self.losses), list(self.batch_lengths)
        return new

    def loss(self, **kwargs: Any) -> Any:
        """Each batch's loss with its length; ``evaluate`` reduces them (``agg=None`` gives the losses)."""
        return _Batches(np.asarray(self.losses, dtype=float), np.asarray(self.batch_lengths, dtype=float))

    def __repr__(self) -> str:
        return f"Loss({len(self.losses)} batches, mean={self.evaluate('loss'):.4g})"


class _Batches:
    """Each batch's loss and length: reduced by ``Loss``'s aggregations; as an array, the losses."""

    def __init__(self, losses: np.ndarray, lengths: np.ndarray):
        self.losses, self.lengths = losses, lengths

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.losses, dtype=dtype)
