"""A gradient scaler whose scale lives on one device while losses and gradients may live on other device types.

``torch.amp.GradScaler`` copies its scale (and its inf flag) to another device with ``non_blocking=True``. From a
GPU to the CPU that copy lands in pinned memory *later*, while the CPU reads it at once: a CPU replica's loss
would be multiplied by whatever the memory held, and a CPU part's gradients unscaled by it (and an inf found
there overwritten by the copy's zero). :class:`DeviceScaler` makes the copies to a foreign device type blocking;
copies between devices of the scale's own type stay asynchronous (stream-ordered, hence safe).
"""
from __future__ import annotations

import threading
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import torch

__all__ = ['DeviceScaler']


class DeviceScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler`` on ``device`` that also scales and unscales safely on other device types.

    A blocking copy of the scale is made once per device and step (dropped when the scale changes); gradients on
    a foreign device are unscaled there with a blocking copy of the inverse scale and their own inf flag.
    """

    def __init__(self, device: torch.device | str = 'cuda', **kwargs: Any):
        self.scale_device = torch.device(device)
        super().__init__(self.scale_device.type, **kwargs)
        self._copies: dict[torch.device, torch.Tensor] = {}
        self._lock = threading.Lock()
        self._make_scale()     # now, on its device: not lazily on whichever replica scales a loss first

    def foreign(self, device: torch.device) -> bool:
        """Whether tensors on ``device`` need blocking copies of the scale (another device type)."""
        return device.type != self._device

    def scale(self, outputs: Any) -> Any:
        """Multiply by the scale; a loss on a foreign device gets a blocking copy of it."""
        if self._enabled and isinstance(outputs, torch.Tensor) and self.foreign(outputs.device):
            return outputs * self._scale_on(outputs.device)
        if self._enabled and self._scale is None:       # unpickled: the scale goes on its device, not the loss's
            with self._lock:
                self._make_scale()
        return super().scale(outputs)

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Update the scale (``torch.amp.GradScaler.update``) and drop the copies of the old one."""
        super().update(new_scale)
        self._copies = {}

    def forget(self, optimizer: torch.optim.Optimizer) -> None:
        """Drop what ``unscale_`` and ``step`` recorded for ``optimizer`` in a step that never reached ``update``."""
        self._per_optimizer_states.pop(id(optimizer), None)

    @torch.no_grad()
    def unscale_grads(self, grads: list[torch.Tensor]) -> bool:
        """Divide ``grads`` by the current scale in place, outside the optimizer's record (``unscale_`` stays free
        for the step's own gradients); whether one holds a nan or an inf (one host synchronization).

        SAM unscales its first pass's gradients here: the step then unscales the second pass's as usual.
        """
        if not self._enabled or not grads:
            return False
        self._make_scale()
        inverse = self._scale.double().reciprocal().float()
        groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = defaultdict(list)
        for grad in grads:
            groups[(grad.device, grad.dtype)].append(grad)
        found = []
        for (device, _), tensors in groups.items():
            flag = torch.zeros(1, dtype=torch.float32, device=device)
            scale = inverse if device == inverse.device else inverse.to(device)    # a blocking copy elsewhere
            torch._amp_foreach_non_finite_check_and_unscale_(tensors, flag, scale)
            found.append(flag.to(self.scale_device))
        return bool(torch.cat(found).any())

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the scaler's state and drop the copies of the old scale."""
        super().load_state_dict(state_dict)
        self._copies = {}

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state['_copies'], state['_lock'] = {}, None      # a lock does not pickle; a fresh one is made on load
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._lock = threading.Lock()

    def _scale_on(self, device: torch.device) -> torch.Tensor:
        copy = self._copies.get(device)
        if copy is None:
            with self._lock:                    # replica threads scale their losses concurrently
                self._make_scale()
                copy = self._copies.get(device)
                if copy is None:
                    copy = self._copies[device] = self._scale.to(device)        # blocking
        return copy

    def _make_scale(self) -> None:
        """Make the scale on ``scale_device`` if it is not there (a new or unpickled scaler)."""
        if self._enabled and self._scale is None:
            self._lazy_init_scale_growth_tracker(self.scale_device)

    def _unscale_grads_(self, optimizer: torch.optim.Optimizer, inv_scale: torch.Tensor, found_inf: torch.Tensor,
                        allow_fp16: bool) -> dict[torch.device, torch.Tensor]:
        own, foreign = [], defaultdict(list)
        for group in optimizer.param_groups:
            for param in group['params']:
                if param.grad is not None:
                    (foreign[param.grad.device] if self.foreign(param.grad.device) else own).append(param)
        found = super()._unscale_grads_(_params(own), inv_scale, found_inf, allow_fp16) if own else {}
        for device, params in foreign.items():
            found.update(super()._unscale_grads_(_params(params), inv_scale.to(device),        # blocking copy
                                                 torch.zeros((), dtype=torch.float32, device=device), allow_fp16))
        return found


def _params(params: list[torch.Tensor]) -> SimpleNamespace:
    """What ``GradScaler._unscale_grads_`` reads of an optimizer: its parameter groups."""
    return SimpleNamespace(param_groups=[{'params': params}])
