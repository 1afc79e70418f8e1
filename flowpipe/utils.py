"""Small helpers that batchflow users import from ``batchflow.utils``."""
from __future__ import annotations

from typing import Any

__all__ = ['is_iterable']


def is_iterable(value: Any) -> bool:
    """Whether ``value`` holds several items: iterable and not a string or bytes."""
    if isinstance(value, (str, bytes)):
        return False
    try:
        iter(value)
    except TypeError:
        return False
    return True
