"""The few collectives the engines' parts run on CPU or GPU tensors: coalesced all-reduces and broadcasts from rank 0.

The CPU tensors of the last few collectives are kept here: gloo's worker thread releases a finished collective's
tensors a moment after the caller goes on, and a tensor whose Python object died first makes that thread take the
GIL, which aborts a process whose interpreter is exiting by then. Kept, the Python objects outlive the thread's
release (a step's last collectives are a few small tensors; a flat bucket is at most ``reduce.BUCKET_BYTES``).
"""
from __future__ import annotations

import collections
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

from .reduce import buckets

__all__ = ['all_reduce', 'coalesced', 'from_rank_0', 'kept']

_RECENT: collections.deque = collections.deque(maxlen=4)


def kept(*tensors: torch.Tensor) -> None:
    """Keep the Python objects of a collective's CPU tensors alive a while (see the module docstring)."""
    if tensors[0].device.type == 'cpu':
        _RECENT.append(tensors)


def all_reduce(flat: torch.Tensor) -> torch.Tensor:
    """``flat`` summed over the ranks, in place."""
    kept(flat)
    dist.all_reduce(flat)
    return flat


def from_rank_0(flat: torch.Tensor) -> torch.Tensor:
    """``flat`` as rank 0 holds it, in place."""
    kept(flat)
    dist.broadcast(flat, src=0)
    return flat


def coalesced(tensors: Sequence[torch.Tensor], collective: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Replace ``tensors`` by ``collective`` of their values, one flat buffer per bucket of one dtype
    (``reduce.buckets``): a few collectives per step instead of one per tensor."""
    for bucket in buckets(tensors):
        group = [tensors[i] for i in bucket]
        flat = collective(_flatten_dense_tensors(group))
        torch._foreach_copy_(group, list(_unflatten_dense_tensors(flat, group)))
