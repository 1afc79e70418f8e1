"""Monitors: variables shown on the progress bar, with their last value formatted compactly."""
from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from ..expr.context import Context

__all__ = ['Monitor', 'format_value', 'make_monitors']

_MISSING = '-'
_MAX_TEXT = 24


class Monitor:
    """One value on the bar: a variable name or a named expression (e.g. ``V('acc')``), under a label."""

    def __init__(self, source: Any, label: str | None = None):
        if not isinstance(source, str) and not callable(getattr(source, 'get', None)):
            raise TypeError(f"Expected a monitor to be a variable name or a named expression such as V('loss'). "
                            f"Received: {source!r}.")
        self.source = source
        self.label = label or _label_of(source)

    def read(self, variables: Mapping[str, Any]) -> Any:
        """The monitored value now, or ``None`` while it does not exist yet."""
        if isinstance(self.source, str):
            return variables.get(self.source)
        try:
            return self.source.get(Context(variables=variables))
        except KeyError:     # the variable is created later in the run (e.g. by the first batch)
            return None

    def __repr__(self) -> str:
        return f"Monitor({self.source!r}, label={self.label!r})"


def _label_of(source: Any) -> str:
    if isinstance(source, str):
        return source
    name = getattr(source, 'name', None)
    return name if isinstance(name, str) else str(source)


def make_monitors(spec: Any) -> list[Monitor]:
    """Monitors from ``None``, a name, an expression, a ``(label, source)`` tuple, a dict label -> source, or a
    list of any of these (a list of names is several monitors, a 2-tuple is one labelled monitor)."""
    if spec is None:
        return []
    if isinstance(spec, Monitor):
        return [spec]
    if isinstance(spec, Mapping):
        return [Monitor(source, str(label)) for label, source in spec.items()]
    if isinstance(spec, (list, tuple)):
        if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
            return [Monitor(spec[1], spec[0])]
        return [monitor for item in spec for monitor in make_monitors(item)]
    return [Monitor(spec)]


def format_value(value: Any) -> str:
    """A short text for a monitored value: the last item of a sequence, numbers with 4 significant digits."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        value = value[-1] if len(value) else None
    if value is None:
        return _MISSING
    if hasattr(value, 'shape') and hasattr(value, 'reshape'):     # numpy arrays and scalars, torch tensors
        if _size(value) != 1:
            return f"array{tuple(value.shape)}"
        value = value.reshape(-1)[0].item()
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        return f"{float(value):.4g}"
    text = str(value)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT - 1] + '…'


def _size(array: Any) -> int:
    size = array.numel() if callable(getattr(array, 'numel', None)) else getattr(array, 'size', 0)
    return int(size)
