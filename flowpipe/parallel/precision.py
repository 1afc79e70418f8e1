"""Precision: how a training step computes (autocast) and protects small gradients (loss scaling).

An engine holds one precision object and calls it at fixed points of its loop: ``autocast(device)`` around each
piece's forward and loss, ``convert_loss`` and ``scale`` before each backward, ``unscale`` before gradients are
clipped (``unscale_grads`` for the gradients SAM reads before the step), ``step`` for the one optimizer step of a
batch, ``discard_step`` when the step fails between them.
``state`` / ``load_state`` carry the scaler's state through a model file (flowpipe's own stateful objects, the
execution nodes and the scheduler wrapper included, name these two methods so; the torch objects they hold keep
torch's ``state_dict``). :func:`make_precision` chooses the object from the plan (``amp``):

- :class:`Precision`: the parameters' dtype, no autocast, no scaling (the default);
- :class:`MixedPrecision`: ``torch.autocast`` in ``float16`` with one ``GradScaler`` for the whole batch (CUDA), or
  in ``bfloat16`` without scaling (a CPU, or CUDA by choice).
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..torchutils import NO_CONTEXT
from .plan import DevicePlan
from .scaler import DeviceScaler

__all__ = ['MixedPrecision', 'Precision', 'make_precision']


class Precision:
    """Full precision: every hook is a no-op, and ``step`` is ``optimizer.step()``."""

    #: the ``torch.amp.GradScaler`` of the batch, or ``None`` when losses are not scaled
    scaler: torch.amp.GradScaler | None = None

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """The context of one piece's forward and loss on ``device``."""
        return NO_CONTEXT

    def convert_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss in the dtype its weighting and backward start from."""
        return loss

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The tensor to call ``backward()`` on."""
        return loss

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring the optimizer's gradients to their true values (before clipping)."""

    def unscale_grads(self, grads: list[torch.Tensor]) -> bool:
        """Bring ``grads`` (not the optimizer's: SAM's first pass) to their true values in place; whether one holds a
        nan or an inf there (always ``False`` without loss scaling, where nothing is checked)."""
        return False

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The one optimizer step of a batch."""
        optimizer.step()

    def discard_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Forget a step that failed after ``unscale`` or inside ``step`` (nothing to forget here)."""

    def state(self) -> dict[str, Any]:
        """What a model file keeps of the precision (nothing here)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore ``state()``; the state of another precision (a scaler saved on a GPU) is ignored."""

    def __repr__(self) -> str:
        return f'{type(self).__name__}()'


class MixedPrecision(Precision):
    """Autocast to ``dtype`` on devices of ``device``'s type; ``float16`` also scales the loss (``GradScaler``).

    Each piece's weighted loss is converted to float32 and multiplied by the scale before backward; the
    gradients summed over the batch are unscaled once (before clipping, or by ``step``), and the scaler steps
    the optimizer once per batch (skipping the step when a gradient is not finite) and updates its scale.

    Args:
        device: the device the scale lives on (a plan's first CUDA device); autocast applies to its device type.
        dtype: the autocast dtype; ``torch.bfloat16`` needs no loss scaling, so it gets no scaler.
    """

    def __init__(self, device: torch.device, dtype: torch.dtype = torch.float16):
        self.device_type = torch.device(device).type
        self.dtype = dtype
        if dtype == torch.float16:
            self.scaler = DeviceScaler(device)

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """``torch.autocast`` for this precision's device type, whatever ``device`` a piece starts on.

        Autocast changes only the operations of its device type: a piece on a CPU replica (or a CPU part of a
        model-parallel module) computes in full precision under CUDA autocast, while a CUDA part of a module whose
        first part is on the CPU is autocast.
        """
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def convert_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss in float32: a half-precision loss would round the piece weighting."""
        return loss.float()

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss multiplied by the current scale."""
        return loss if self.scaler is None else self.scaler.scale(loss)

    def unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide the optimizer's gradients by the scale (once per step) and note any non-finite value."""
        if self.scaler is not None:
            self.scaler.unscale_(optimizer)

    def unscale_grads(self, grads: list[torch.Tensor]) -> bool:
        """Divide ``grads`` by the scale in place; whether one is not finite (one host synchronization)."""
        return False if self.scaler is None else self.scaler.unscale_grads(grads)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """Step through the scaler (skipped when a gradient is not finite), then update the scale."""
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()

    def discard_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Forget that a failed step unscaled the gradients (the scale stays): the next batch unscales its own,
        instead of stepping with gradients still multiplied by the scale."""
        if self.scaler is not None:
            self.scaler.forget(optimizer)

    def state(self) -> dict[str, Any]:
        """The scaler's state: scale, growth tracker and factors (plain numbers)."""
        return {} if self.scaler is None else {'scaler': self.scaler.state_dict()}

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore the scaler; an empty state (saved without a scaler) keeps the fresh one."""
        if self.scaler is not None and state.get('scaler'):
            self.scaler.load_state_dict(state['scaler'])

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.device_type!r}, {self.dtype}, scaler={self.scaler is not None})'


def make_precision(plan: DevicePlan) -> Precision:
    """The precision a plan asks for: ``plan.amp`` is the autocast dtype (``'float16'`` with a gradient scaler,
    ``'bfloat16'`` without one; ``make_plan`` resolves ``amp=True``) or ``False`` for full precision.

    With a CUDA device in the plan, autocast is CUDA's and the scale lives on the first CUDA device, even when the
    primary is the CPU (``['CPU:0', 'GPU:0']``: the CPU pieces compute in full precision); on CPU devices only,
    autocast is the CPU's, in bfloat16. A sharded plan on a GPU computes in full precision here: FSDP's own mixed
    precision casts the gathered parameters (``engines.sharded``); on a CPU it autocasts as any CPU plan.
    """
    if not plan.amp or plan.engine == 'sharded' and plan.primary.device.type == 'cuda':
        return Precision()
    gpus = [dev.device for dev in plan.devices if dev.device.type == 'cuda']
    return MixedPrecision(gpus[0] if gpus else plan.primary.device, getattr(torch, plan.amp))
