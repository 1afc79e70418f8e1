"""The layout a run resumes on when it is told one: ``resumed_with(device=..., microbatch=..., pipeline=...)``.

``python -m flowpipe verify`` replays a checkpoint on another layout by running the resume inside
``resumed_with``; the pipeline's stage count and every model a run resumes read ``overrides()``.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Iterator

__all__ = ['overrides', 'resumed_with']

_OVERRIDES: contextvars.ContextVar[dict | None] = contextvars.ContextVar('flowpipe_resumed_with', default=None)


@contextlib.contextmanager
def resumed_with(**config: Any) -> Iterator[None]:
    """Within the block, every model a run resumes from a checkpoint is built with these config items over its
    own (``device=``, ``microbatch=``, ``dtype=``...): how ``python -m flowpipe verify`` replays a checkpoint on
    another layout."""
    token = _OVERRIDES.set(dict(config))
    try:
        yield
    finally:
        _OVERRIDES.reset(token)


def overrides() -> dict | None:
    """The config items of the enclosing ``resumed_with``, or ``None``."""
    return _OVERRIDES.get()
