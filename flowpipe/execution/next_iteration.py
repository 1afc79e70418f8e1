"""``NextIteration``: the iteration ``next_batch`` keeps in the pipeline's state between calls.

A run's generator ends for good when a batch raises (its workers are stopped and its stages closed), so a later
``next`` on it would raise ``StopIteration`` as if the data had run out. This wrapper remembers the error instead:
later calls raise a ``RuntimeError`` naming the failed batch until ``reset('iter')`` (or other arguments) starts a
new iteration. Going on with the next batch is ``SkipBatch``'s job, raised inside an action: only the run knows
which batches were prepared ahead and which stateful actions ran.
"""
from __future__ import annotations

from typing import Any, Iterator

from ..errors import add_note

__all__ = ['NextIteration']


class NextIteration:
    """The batches of one ``next_batch`` iteration, counted, and the error that ended it, if one did.

    Args:
        batches: the run's generator (``iterate(..., infinite=True)`` unless a limit was given).
    """
    __slots__ = ('_batches', 'delivered', 'failure')

    def __init__(self, batches: Iterator[Any]):
        self._batches = batches
        self.delivered = 0                          # batches handed to the caller
        self.failure: BaseException | None = None   # the error of batch ``delivered``, which ended the iteration

    def __iter__(self) -> NextIteration:
        return self

    def __next__(self) -> Any:
        if self.failure is not None:
            raise RuntimeError(
                f"Expected a next_batch iteration that can go on. Received: one that ended when its batch "
                f"#{self.delivered} (counting from 0) raised {type(self.failure).__name__}: {self.failure}. "
                "Call next_batch(..., reset='iter') or pipeline.reset('iter') to start a new iteration; raise "
                "SkipBatch in an action to drop a bad batch and go on.") from self.failure
        try:
            batch = next(self._batches)
        except StopIteration:
            raise
        except BaseException as error:              # Ctrl-C too: the generator is closed either way
            self.failure = error
            if isinstance(error, Exception):
                add_note(error, f"flowpipe: this error ended next_batch's iteration at its batch #{self.delivered} "
                                "(counting from 0); later calls with the same arguments raise until "
                                "next_batch(..., reset='iter') or pipeline.reset('iter') starts a new one.")
            raise
        self.delivered += 1
        return batch

    def close(self) -> None:
        """Close the run's generator (stopping its prefetch workers)."""
        self._batches.close()
