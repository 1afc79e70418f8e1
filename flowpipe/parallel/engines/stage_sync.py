"""The gradient synchronization of a pipelined model: each stage's gradients summed over the data-parallel pipelines
(a sibling of ``ddp.DdpAllReduce`` over the ``dp`` group of the stage's ranks, instead of the world).

The schedule runs every micro-batch's backward on its loss as it is (a sum over the global normalizer, or a mean
weighted by its share of the global batch), so each pipeline's stage holds its part of the full-batch gradient;
one all-reduce (sum) over the ``dp`` group, of every gradient flattened together, makes it the whole (a parameter
without a gradient contributes zeros). Every stage steps its own parameters: nothing to send after the step. The
non-finite flags are combined over the world (a stage sees its own gradients only), and the state methods are
collectives (the stages are gathered into one state).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from .collectives import kept
from .sync import GradientSync

if TYPE_CHECKING:
    from .stage_placement import StagePlacement

__all__ = ['StageAllReduce']


class StageAllReduce(GradientSync):
    """Each stage's gradients summed over the pipelines (see the module docstring); ``group``: this rank's ``dp``
    group, ``None`` for a single pipeline (nothing to sum)."""

    collective_state = True

    def __init__(self, group: Any = None):
        self.group = group

    def wrap(self, placement: 'StagePlacement', plan: Any) -> list[nn.Module]:
        """The placement's replicas as they are (the stage's ``chain`` kept: its trained parameters are read at
        every step, a parameter frozen after the engine was built then left alone)."""
        self.chain = placement.chain
        return list(placement.replicas)

    @torch.no_grad()
    def reduce(self, active: tuple[int, ...]) -> None:
        """The stage's gradients (zeros where none) summed over the pipelines, in place."""
        params = [param for param in self.chain.parameters() if param.requires_grad]
        for param in params:
            if param.grad is None:
                param.grad = torch.zeros_like(param)
        if self.group is None or not params:
            return
        flat = torch.cat([param.grad.reshape(-1) for param in params])
        kept(flat)
        dist.all_reduce(flat, group=self.group)
        pieces = flat.split([param.numel() for param in params])
        torch._foreach_copy_([param.grad for param in params],
                             [piece.view_as(param) for piece, param in zip(pieces, params)])

    def any_nonfinite(self, flag: torch.Tensor) -> bool:
        """Whether some rank's flag is set (one all-reduce over the world: every stage takes the same decision)."""
        flag = flag.to(torch.float64).cpu()
        kept(flag)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag)
