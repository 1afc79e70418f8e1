"""Where epochs end in a run's stream of batches.

A run's batches cut the concatenated epoch orders (see ``flowpipe.data.sampling``). With ``drop_last`` every
epoch is a whole number of batches. Without it a batch may hold the tail of one epoch and the head of the next:
**an epoch ends after the batch that holds its last item**, and a batch belongs to the epoch of its first item.
So the epoch-end events of a run without ``drop_last`` come after the first batches of the next epoch have been
counted in the stream, never before the last item of the epoch was trained on. With ``whole_epochs`` every epoch
ends with its own (possibly short) batch, as with ``drop_last`` no batch crosses an epoch boundary, and the
epoch-end events come right after the epoch's last batch.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ['EpochClock']


@dataclass(frozen=True)
class EpochClock:
    """The epochs of batch number ``seq`` (0-based) of a run.

    Args:
        size: the number of items of an epoch (the dataset's, every rank's of a distributed job alike).
        batch_size: the run's (global) batch size.
        drop_last: whether each epoch's incomplete tail is dropped.
        n_epochs: the run's number of epochs, or ``None``.
        whole_epochs: whether each epoch ends with its own batch (short unless ``batch_size`` divides ``size``).
    """
    size: int
    batch_size: int
    drop_last: bool = False
    n_epochs: int | None = None
    whole_epochs: bool = False

    @property
    def per_epoch(self) -> int | None:
        """The number of batches of every epoch, ``None`` where batches cross epoch boundaries."""
        if self.drop_last:
            return self.size // self.batch_size
        return -(-self.size // self.batch_size) if self.whole_epochs else None

    @property
    def epoch_items(self) -> int:
        """Items one epoch feeds: the dataset's, less the tail ``drop_last`` drops (see ``flowpipe.data.sampling``)."""
        return self.size - self.size % self.batch_size if self.drop_last else self.size

    def epoch_of(self, seq: int) -> int:
        """The epoch of the batch's first item."""
        if self.per_epoch is not None:
            return seq // self.per_epoch
        return seq * self.batch_size // self.size

    def end_step(self, epoch: int) -> int:
        """The number of batches completed when epoch ``epoch`` ends."""
        if self.per_epoch is not None:
            return (epoch + 1) * self.per_epoch
        return ((epoch + 1) * self.size - 1) // self.batch_size + 1

    def ended(self, seq: int) -> range:
        """The epochs whose last item is in batch ``seq`` (empty for most batches; several for a batch larger
        than an epoch)."""
        per_epoch = self.per_epoch
        if per_epoch is not None:
            epoch = seq // per_epoch
            return range(epoch, epoch + 1) if (seq + 1) % per_epoch == 0 else range(0)
        first, end = seq * self.batch_size, (seq + 1) * self.batch_size
        last = end // self.size
        if self.n_epochs is not None:
            last = min(last, self.n_epochs)
        return range(-(-(first + 1) // self.size) - 1, last)
