"""Gradient synchronization parts: how the pieces' gradients become the full-batch gradient where the optimizer
steps, and how the new state reaches every copy of the module.

A part has a small interface, which the engine's hooks of the same names call:

- ``wrap(placement, plan)``: the modules the pieces run through (a DDP wrapper, an FSDP-sharded module, or the
  placement's replicas as they are);
- ``counted()`` (after the ranks' item counts are exchanged), ``zero_grad(optimizer)``, ``backward_sync(last)``
  (the context of each piece's forward and backward, ``last``: a replica's last piece), ``reduce(active)`` (the
  full-batch gradient onto the primary), ``broadcast(active)`` (the primary's new state to the copies),
  ``share_parameters()`` (SAM's perturbed weights), ``sync()`` (after loading weights);
- ``any_nonfinite(flag)``: whether a non-finite flag is set on some copy; ``backward_factor``, ``lockstep`` and
  ``collective_state`` say how the step is to be run and the state saved;
- ``state_dict(module)`` and the like: the state as one process holds it.

Kinds: ``GradientSync`` (none: one module, gradients accumulate in place), ``ReplicaSum`` (in-process sum over
replicas), ``ddp.DdpAllReduce`` and ``fsdp.FsdpReduceScatter`` (siblings over the ranks of a job). A new way of
synchronizing is one new part.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Mapping

import torch
from torch import nn

from ...torchutils import NO_CONTEXT
from . import reduce

if TYPE_CHECKING:
    from .base import Engine
    from .placement import Placement
    from ..split import Piece
    from .tensors import BatchTensors

__all__ = ['GradientSync', 'ReplicaSum']


class GradientSync:
    """No synchronization: one module, whose pieces' gradients accumulate in place; nothing to send anywhere.

    Attributes:
        backward_factor: what each weighted piece loss is multiplied by for its backward only: 1 here; DDP's
            averaging all-reduce makes it the number of ranks, so the averaged gradients are the weighted sums.
        lockstep: whether every rank runs as many pieces as the rank with the most (every forward a collective).
        collective_state: whether the ``state_dict`` methods are collectives every rank calls (the whole state
            gathered on rank 0).
    """

    backward_factor: float = 1.0
    lockstep: bool = False
    collective_state: bool = False

    def wrap(self, placement: 'Placement', plan: Any) -> list[nn.Module]:
        """The modules the pieces run through: the placement's replicas."""
        return list(placement.replicas)

    def counted(self) -> None:
        """Called after the ranks exchanged their item counts (``ranks.DataRanks``): nothing here."""

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Clear the optimizer's gradients before a batch (``set_to_none``)."""
        optimizer.zero_grad(set_to_none=True)

    def backward_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """The context of one piece's forward and backward: a no-op."""
        return NO_CONTEXT

    def reduce(self, active: tuple[int, ...]) -> None:
        """Nothing: the module's ``.grad`` is the full-batch gradient."""

    def broadcast(self, active: tuple[int, ...]) -> None:
        """Nothing: no copy to update."""

    def share_parameters(self) -> None:
        """Nothing: no copy to give SAM's perturbed weights to."""

    def sync(self) -> None:
        """The primary's parameters and buffers to the copies (after loading weights)."""
        self.broadcast((0,))

    def any_nonfinite(self, flag: torch.Tensor) -> bool:
        """Whether ``flag`` (``Engine.nonfinite_flag``) is set: the same on every copy here."""
        return bool(flag)

    def join_empty(self, engine: 'Engine', replica: int, piece: 'Piece', batch: 'BatchTensors',
                   keep_outputs: bool, last: bool) -> tuple[torch.Tensor, Any]:
        """A piece without items, run only to join the collectives of a ``lockstep`` part."""
        raise NotImplementedError(f'{type(self).__name__} runs no piece without items.')

    def state_dict(self, module: nn.Module) -> dict:
        """The network's ``state_dict``, keys as in one process."""
        return module.state_dict()

    def load_state_dict(self, module: nn.Module, state: Mapping[str, Any]) -> None:
        """Load a ``state_dict`` (keys as in one process) into the network."""
        module.load_state_dict(state)

    def optimizer_state_dict(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """The optimizer's ``state_dict``, as one process holds it."""
        return optimizer.state_dict()

    def load_optimizer_state_dict(self, module: nn.Module, optimizer: torch.optim.Optimizer,
                                  state: Mapping[str, Any]) -> None:
        """Load an ``optimizer_state_dict`` into ``optimizer``."""
        optimizer.load_state_dict(state)

    def describe(self, engine: 'Engine', batch_size: int | None, loss: Any) -> str | None:
        """What only this part knows of the placement (``None``: the placement's description is the whole)."""
        return None

    def close(self) -> None:
        """Release what the part made."""


class ReplicaSum(GradientSync):
    """In-process data parallel: the replicas' gradients summed onto the primary, in replica order, coalesced
    (``engines.reduce``); after the step, floating buffers (BatchNorm statistics) averaged over the replicas that saw
    data, and the primary's state copied to every replica.

    Attributes:
        params, buffers: every replica's parameters and buffers, the primary's first; ``state``: both.
    """

    def wrap(self, placement: 'Placement', plan: Any) -> list[nn.Module]:
        """The replicas as they are; their tensors listed once."""
        self.devices = list(placement.devices)
        self.params = [list(replica.parameters()) for replica in placement.replicas]
        self.buffers = [list(replica.buffers()) for replica in placement.replicas]
        self.state = [params + buffers for params, buffers in zip(self.params, self.buffers)]
        return list(placement.replicas)

    def reduce(self, active: tuple[int, ...]) -> None:
        """Sum the active replicas' gradients onto the primary."""
        reduce.reduce_gradients(self.params, active, self.devices)

    def share_parameters(self) -> None:
        """Copy the primary's parameters (SAM's perturbed weights) to every replica, coalesced."""
        reduce.broadcast(self.params, self.devices)

    def broadcast(self, active: tuple[int, ...]) -> None:
        """Average floating buffers over ``active`` replicas onto the primary, then copy the primary everywhere.

        Integer buffers (e.g. ``num_batches_tracked``) are taken from the first active replica.
        """
        reduce.average_buffers(self.buffers, active)
        reduce.broadcast(self.state, self.devices)
