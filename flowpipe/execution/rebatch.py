"""``rebatch``: collect processed batches and re-cut them into batches of another size.

The actions after a ``rebatch`` form a new stage that runs in the caller's thread on the re-cut batches. The
re-cut batches are numbered 0, 1, 2... within their stage; their seeds come from spawn key ``(1 + stage, seq)``.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

from ..errors import SkipBatch, StopPipeline

__all__ = ['rebatch_stage']


def rebatch_stage(stream: Iterator[Any], runner: Any, batch_size: int, merge: Callable | None = None,
                  drop_last: bool = False, options: dict | None = None) -> Iterator[Any]:
    """Yield batches of ``batch_size`` items cut from ``stream`` and processed by ``runner``.

    Args:
        stream: processed batches of the previous stage.
        runner: the ``BatchRunner`` of this stage.
        batch_size: items per re-cut batch.
        merge: ``merge(batches, batch_size) -> (batch, rest)``; the batch class's ``merge`` by default.
        drop_last: drop the final batch when it has fewer than ``batch_size`` items.
        options: keywords of the batch class's ``merge`` (``components``, ``batch_class``).
    """
    if merge is None:
        merge = functools.partial(_class_merge, options=options or {})
    pending: list = []
    count = seq = 0
    try:
        for batch in stream:
            pending.append(batch)
            count += batch.size
            while count >= batch_size:
                cut, rest = _merge(merge, pending, batch_size)
                pending = [rest] if rest is not None and rest.size else []
                count -= cut.size
                done = _process(runner, seq, cut)
                seq += 1
                if done is _STOP:
                    return
                if done is not _SKIP:
                    yield done
        if pending and count and not drop_last:
            cut, _ = _merge(merge, pending, None)
            done = _process(runner, seq, cut)
            if done is not _STOP and done is not _SKIP:
                yield done
    finally:
        close = getattr(stream, 'close', None)
        if close is not None:
            close()


_SKIP, _STOP = object(), object()


def _class_merge(batches: list, batch_size: int | None, options: dict) -> tuple[Any, Any]:
    return type(batches[0]).merge(batches, batch_size, **options)


def _merge(merge: Callable, batches: list, batch_size: int | None) -> tuple[Any, Any]:
    return merge(batches, batch_size)


def _process(runner: Any, seq: int, batch: Any) -> Any:
    try:
        return runner.apply(seq, batch)
    except SkipBatch:
        return _SKIP
    except StopPipeline:
        return _STOP
