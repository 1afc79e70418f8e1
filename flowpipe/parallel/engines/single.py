"""The single-replica engine: one device, or one model spread over devices (model parallel).

Micro-batching reads like a hand-written accumulation loop: zero the gradients, run each chunk's forward and
backward with its loss weighted by ``chunk_size / batch_size``, step the optimizer once.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from ..devices import LogicalDevice
from ..plan import DevicePlan
from .base import (Engine, StepResult, Tensors, as_batch, autocast, batch_size_of, concat, floating_dtype, move,
                   set_mode, to_device)

__all__ = ['SingleEngine']


class SingleEngine(Engine):
    """Runs every step on one module; the module is moved to the plan's primary device unless ``placed``.

    Args:
        module: the network.
        plan: a plan with one replica.
        placement: ``{child_name: device}`` when the module is already spread over devices (model parallel);
            the module is then left where it is.
    """

    def __init__(self, module: nn.Module, plan: DevicePlan, placement: dict[str, LogicalDevice] | None = None):
        super().__init__(plan)
        self.device = plan.primary.device
        self.placement = placement
        self._module = module if placement is not None else module.to(self.device)

    @property
    def module(self) -> nn.Module:
        """The module (the only replica)."""
        return self._module

    def train_step(self, inputs: Tensors, targets: Tensors, loss_fn: Callable, optimizer: torch.optim.Optimizer,
                   *, return_outputs: bool = False) -> StepResult:
        """Zero the gradients, accumulate them over the micro-batches, step the optimizer once.

        Args:
            inputs: batch-first tensors fed to ``module(*inputs)``; floating ones are cast to the parameters' dtype.
            targets: batch-first tensors passed as ``loss_fn(outputs, *targets)``; integer ones stay integer.
            loss_fn: returns the mean loss of the items it is given.
            optimizer: built on ``engine.parameters()``.
            return_outputs: also return the outputs of the whole batch, in order, on the primary device.
        """
        inputs, targets = as_batch(inputs, 'inputs'), as_batch(targets, 'targets')
        size = batch_size_of(inputs, targets)
        batch = (inputs, targets, floating_dtype(self._module))
        set_mode([self._module], True)
        optimizer.zero_grad(set_to_none=True)
        losses, outputs = [], []
        for piece in self.pieces(size):
            loss, out = self.run_piece(self._module, self.device, piece, batch, loss_fn, return_outputs)
            losses.append(loss)
            outputs.append(out)
        self.step(optimizer)
        total = float(losses[0] if len(losses) == 1 else torch.stack([loss.to(self.device) for loss in losses]).sum())
        return StepResult(total, to_device(concat(outputs), self.device) if return_outputs else None)

    @torch.no_grad()
    def predict(self, inputs: Tensors) -> Any:
        """Outputs of the whole batch in evaluation mode, chunk by chunk when micro-batches are on."""
        inputs = as_batch(inputs, 'inputs')
        size = batch_size_of(inputs, [])
        dtype = floating_dtype(self._module)
        set_mode([self._module], False)
        outputs = []
        for piece in self.pieces(size):
            with autocast(self.amp, self.device):
                outputs.append(self._module(*[move(t, self.device, dtype, piece) for t in inputs]))
        return to_device(concat(outputs), self.device)
