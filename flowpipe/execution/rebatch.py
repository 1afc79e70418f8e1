"""``rebatch``: collect processed batches and re-cut them into batches of another size.

The actions after a ``rebatch`` form a new stage that runs in the caller's thread on the re-cut batches. The
re-cut batches are numbered 0, 1, 2... within their stage; their seeds come from spawn key ``(1 + stage, seq)``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

from ..errors import SkipBatch, StopPipeline
from .nodes import CheckpointError, Node

__all__ = ['RebatchStage']


class RebatchStage(Node):
    """Batches of ``batch_size`` items cut from the processed batches of ``source`` and processed by ``runner``.

    Args:
        source: processed batches of the previous stage.
        runner: the ``BatchRunner`` of this stage.
        batch_size: items per re-cut batch.
        merge: ``merge(batches, batch_size) -> (batch, rest)``; the batch class's ``merge`` by default.
        drop_last: drop the final batch when it has fewer than ``batch_size`` items.
        options: keywords of the batch class's ``merge`` (``components``, ``batch_class``).

    Between two re-cut batches it holds items of the previous stage, which a checkpoint does not keep: its
    ``state()`` refuses.
    """

    def __init__(self, source: Node, runner: Any, batch_size: int, merge: Callable | None = None,
                 drop_last: bool = False, options: dict | None = None):
        self.source, self.runner, self.batch_size, self.drop_last = source, runner, batch_size, drop_last
        self.merge = merge if merge is not None else functools.partial(_class_merge, options=options or {})

    def __iter__(self) -> Iterator[Any]:
        pending: list = []
        count = seq = 0
        try:
            for batch in self.source:
                pending.append(batch)
                count += batch.size
                while count >= self.batch_size:
                    cut, rest = self.merge(pending, self.batch_size)
                    pending = [rest] if rest is not None and rest.size else []
                    count -= cut.size
                    done = _process(self.runner, seq, cut)
                    seq += 1
                    if done is _STOP:
                        return
                    if done is not _SKIP:
                        yield done
            if pending and count and not self.drop_last:
                cut, _ = self.merge(pending, None)
                done = _process(self.runner, seq, cut)
                if done is not _STOP and done is not _SKIP:
                    yield done
        finally:
            self.close()

    def close(self) -> None:
        self.source.close()

    def state(self) -> dict:
        raise CheckpointError("Expected a pipeline without rebatch to checkpoint. Received: a rebatch stage, which "
                              "holds items of earlier batches between its own; checkpoints do not keep them. Run "
                              "the pipeline without checkpoint=, or do the rebatching in the dataset.")

    def load_state(self, state: dict) -> None:
        self.state()


_SKIP, _STOP = object(), object()


def _class_merge(batches: list, batch_size: int | None, options: dict) -> tuple[Any, Any]:
    return type(batches[0]).merge(batches, batch_size, **options)


def _process(runner: Any, seq: int, batch: Any) -> Any:
    try:
        return runner.apply(seq, batch)
    except SkipBatch:
        return _SKIP
    except StopPipeline:
        return _STOP
