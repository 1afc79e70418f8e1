"""Which items each micro-batch of a pipeline stage holds, for dropout drawn by item (``'randomness': 'by_item'``,
``flowpipe.parallel.item_random``): a stage's dropout modules draw the masks of the items' places in the global
batch, as one process does on the whole batch.

A pipeline's part of every global batch starts after the parts of the pipelines before it (``part_offset``: one
all-gather of the item counts over the ``dp`` group); micro-batch ``i`` of the part starts at its piece's start
after that, padded to the longest micro-batch's rows (a padding row draws masks of its own, which the last stage
drops with the row). ``ChunkItems`` tells a stage's ``ItemStreams`` the items of every micro-batch the schedule runs
forward (``PipelineStage.forward_one_chunk`` names it), and of the first one before the schedule starts: torch's
first step runs the stage once more on the first micro-batch's shapes (metadata inference).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch
import torch.distributed as dist

from ..item_random import ItemStreams
from ..mesh import Mesh
from ..split import Piece

__all__ = ['ChunkItems', 'part_offset']


def part_offset(size: int, group: Any, mesh: Mesh) -> int:
    """The first item of this pipeline's part (of ``size`` items) in the global batch: the item counts of the parts
    before it (a collective of the ``dp`` ``group``; 0 without one)."""
    if group is None:
        return 0
    counts = [torch.zeros(1, dtype=torch.long) for _ in range(mesh.data_size)]
    dist.all_gather(counts, torch.tensor([size]), group=group)
    return int(sum(counts[:mesh.data_rank]))


class ChunkItems:
    """The items of each micro-batch of the step a stage runs, told to its dropout modules."""

    def __init__(self) -> None:
        self.streams: ItemStreams | None = None
        self._starts: list[int] | None = None
        self._size = 0


    @contextlib.contextmanager
    def step(self, streams: ItemStreams, offset: int, pieces: Sequence[Piece]) -> Iterator[None]:
        """Within the block, the schedule runs ``pieces`` (micro-batches of the part, each padded to the longest),
        the part's first item at ``offset`` of the global batch; ``streams`` in its ``step`` context. No pieces:
        nothing runs."""
        if pieces:
            self.streams, self._size = streams, max(piece.size for piece in pieces)
            self._starts = [offset + piece.start for piece in pieces]
            streams.piece(0, self._starts[0], self._size)
        try:
            yield
        finally:
            self._starts = None

    def wrap(self, stage: Any) -> None:
        """Each forward of a micro-batch on ``stage`` (a ``PipelineStage``) first tells the streams its items."""
        forward = stage.forward_one_chunk

        def forward_one_chunk(chunk: int, *args: Any, **kwargs: Any) -> Any:
            if self._starts is not None and self.streams is not None:
                with self.streams.piece(0, self._starts[chunk], self._size):   # the mode of its random calls
                    return forward(chunk, *args, **kwargs)
            return forward(chunk, *args, **kwargs)
        stage.forward_one_chunk = forward_one_chunk
