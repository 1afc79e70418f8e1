"""The one contract of what a file keeps of an object: ``state()`` gives it as plain data (containers, numbers,
CPU tensors: what the safe reader, ``flowpipe.safe_pickle``, rebuilds), ``load_state(state)`` puts it back.

An object made of such parts lists them once, by name (``TorchModel.parts()``: network, optimizer, decay,
precision, counters, callbacks, averaging). Model files and run checkpoints both keep it as the states of those
parts (``states``) and load it part by part (``load_states``), so a part added to the list is kept by both.
A part whose saved state is ``None`` (or absent) is left as it is, unless it gives the ``default`` state to load
instead (a counter starts from 0); a part listed as ``None`` (a model without a schedule) keeps nothing.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterable, Protocol, runtime_checkable

__all__ = ['Attribute', 'Stateful', 'load_states', 'states']


@runtime_checkable
class Stateful(Protocol):
    """What model files and run checkpoints keep of an object, and how they put it back."""

    def state(self) -> Any:
        """The object's state as plain data."""

    def load_state(self, state: Any) -> None:
        """Continue from ``state()``."""


class Attribute:
    """The value of ``owner.<name>`` as a part (a counter); ``default`` is loaded where a file holds none."""

    def __init__(self, owner: Any, name: str, default: Any = None):
        self.owner, self.name, self.default = owner, name, default

    def state(self) -> Any:
        return getattr(self.owner, self.name)

    def load_state(self, state: Any) -> None:
        setattr(self.owner, self.name, state)


def states(parts: Mapping[str, Stateful | None], leave_out: Iterable[str] = ()) -> dict[str, Any]:
    """``{name: part.state()}`` in the parts' order; ``None`` for a part that is ``None`` or in ``leave_out``."""
    left = set(leave_out)
    return {name: None if part is None or name in left else part.state() for name, part in parts.items()}


def load_states(parts: Mapping[str, Stateful | None], saved: Mapping[str, Any]) -> None:
    """Load each part's saved state, in the parts' order (see the module docstring for ``None`` and absent ones)."""
    for name, part in parts.items():
        if part is None:
            continue
        state = saved.get(name)
        if state is None:
            state = getattr(part, 'default', None)
        if state is not None:
            part.load_state(state)
