"""Where the ranks of a sharded run are, checked where no engine's exchange of item counts does it.

Every model step of a sharded run exchanges the global batch each rank is on (``DistributedEngine``), and the run's
end is one more such exchange (``end_run``). Two places are left, both for a rank that has not stepped yet: the
first build of a model (``exchange_position`` with the batch that builds it, before any collective of the build),
and the end of a run on a rank whose engines never stepped (it skipped every batch the others trained on): it joins
the exchange the others are in with the run's end (``RUN_ENDED``), so every rank fails at once naming the ranks,
instead of one rank leaving and the others waiting for the timeout.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from . import distributed

__all__ = ['RUN_ENDED', 'check_same_batch', 'count_row', 'exchange_position']

#: the batch number a rank exchanges when its sharded run has ended
RUN_ENDED = -2


def count_row(count: int, batch: int, normalizer: float = 0.0, flags: tuple[int, int] = (0, 0)) -> torch.Tensor:
    """A rank's row of the count exchange, ``[count, batch, normalizer, due, stop]`` (``flags``: what the ranks
    agree on after the batch): float64 holds counts, batch and signal numbers exactly (below 2 ** 53) beside a
    fractional normalizer. Every exchange of the ranks' position uses it, so that any two of them can meet."""
    return torch.tensor([count, batch, normalizer, *flags], dtype=torch.float64)


def check_same_batch(batches: list[int], when: str) -> None:
    """Raise on every rank when the ranks (``batches``: the global batch of each, in rank order) are not on the same
    global batch; ``when`` names the exchange (``'training step 3'``)."""
    if len(set(batches)) <= 1:
        return
    on = ', '.join(f'the end of the run on rank {rank}' if batch == RUN_ENDED else
                   f'global batch {batch} on rank {rank}' for rank, batch in enumerate(batches))
    raise RuntimeError(f'Expected every rank to train on the same global batch in {when}. '
                       f'Received: {on} (batches of the run, from 0). A rank skipped a batch the others train '
                       f'on: raise SkipBatch (or StopPipeline) alike on every rank, deciding from values every '
                       f'rank shares (the global batch, a value reduced or broadcast over the ranks), never '
                       f'from one rank\'s shard alone.')


def exchange_position(batch: int, when: str) -> None:
    """Exchange the global batch this rank is on (``RUN_ENDED`` at the run's end) over the job's group, in the
    layout of the engines' count exchange (``count_row``); raise on every rank when they differ."""
    mine = count_row(0, batch)
    if dist.get_backend() == 'nccl':
        mine = mine.to(torch.device('cuda', torch.cuda.current_device()))
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    with distributed.collective(f'the exchange of the ranks\' global batch at {when}'):
        dist.all_gather(every, mine)
    check_same_batch([int(row[1]) for row in torch.stack(every).tolist()], when)
