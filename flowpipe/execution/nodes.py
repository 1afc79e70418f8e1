"""The stages of a run as nodes: iterate, close, and ``state()`` / ``load_state()``.

A run is a chain of nodes, each pulling from the one before it: ``IndexSource`` (the sub-indices of the batches)
→ ``Prefetcher`` (the first stage's stateless actions, ahead, in order) → ``DeferredStage`` (the stateful
actions, in the caller's thread) → ``RebatchStage`` (later stages) → the caller. The action runner itself keeps
nothing between batches: a batch's seed and number come from its position.

A node's ``state()`` describes the run as of the last item it delivered, its upstream's state included (under
``'source'``), so the state of the last node is the state of the whole chain; ``load_state`` (before the first
item) makes the node and its upstream deliver what they would have delivered next. A node that cannot be
restored says so in ``state()``: a checkpoint never silently misses a stage.
"""
from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any, Callable

from ..errors import CheckpointError, SkipBatch, StopPipeline

__all__ = ['CheckpointError', 'DeferredStage', 'IndexSource', 'MapStage', 'Node', 'chain_busy']


class Node(abc.ABC):
    """One stage of a run. Subclasses implement all four methods, so none can forget its state."""

    #: inside an item: what has run of it would be lost by a checkpoint taken now
    busy: bool = False

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Any]:
        """The node's items, pulled from its upstream."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop any workers and close the upstream. Idempotent."""

    @abc.abstractmethod
    def state(self) -> dict:
        """The state as of the last item delivered (upstream's under ``'source'``)."""

    @abc.abstractmethod
    def load_state(self, state: dict) -> None:
        """Continue after the items ``state`` says were delivered; called before iterating."""


def chain_busy(node: Any) -> bool:
    """Whether ``node`` or any node upstream of it is inside an item."""
    while isinstance(node, Node):
        if node.busy:
            return True
        node = getattr(node, 'source', None)
    return False


class IndexSource(Node):
    """The sub-indices of a run's batches: ``make()`` gives a fresh generator of them (the same every time).

    The state is the number of batches drawn; loading it draws and drops that many from a fresh generator, which
    repeats the shuffled orders exactly (they come from the run's root seed).
    """

    def __init__(self, make: Callable[[], Iterator[Any]]):
        self._make = make
        self._batches = make()
        self.drawn = 0

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        item = next(self._batches)
        self.drawn += 1
        return item

    def close(self) -> None:
        close = getattr(self._batches, 'close', None)
        if close is not None:
            close()

    def state(self) -> dict:
        return {'drawn': self.drawn}

    def load_state(self, state: dict) -> None:
        self.close()
        self._batches, self.drawn = self._make(), 0
        for _ in range(int(state['drawn'])):
            next(self._batches)
        self.drawn = int(state['drawn'])


class DeferredStage(Node):
    """Finish each started batch with ``runner.resume`` as the caller asks for it (``gen_batch``, checkpoints).

    ``SkipBatch`` drops the batch, ``StopPipeline`` ends the stage.
    """

    def __init__(self, source: Node, runner: Any):
        self.source, self.runner = source, runner
        self._state: dict | None = None

    def __iter__(self) -> Iterator[Any]:
        try:
            for ctx in self.source:
                self.busy = True
                try:
                    batch = self.runner.resume(ctx)
                except SkipBatch:
                    self._done()
                    continue
                except StopPipeline:
                    self._done()
                    return
                self._done()
                yield batch
        finally:
            self.close()

    def _done(self) -> None:
        self._state = self.source.state()
        self.busy = False

    def close(self) -> None:
        self.source.close()

    def state(self) -> dict:
        return {'source': self.source.state() if self._state is None else self._state}

    def load_state(self, state: dict) -> None:
        self.source.load_state(state['source'])


class MapStage(Node):
    """``fn(item)`` for every item of ``source``; the state is the source's."""

    def __init__(self, source: Node, fn: Callable[[Any], Any]):
        self.source, self.fn = source, fn

    def __iter__(self) -> Iterator[Any]:
        try:
            for item in self.source:
                yield self.fn(item)
        finally:
            self.close()

    def close(self) -> None:
        self.source.close()

    def state(self) -> dict:
        return {'source': self.source.state()}

    def load_state(self, state: dict) -> None:
        self.source.load_state(state['source'])
