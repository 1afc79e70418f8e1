"""Model parallel: the top-level children of a module on different devices.

``device_map={'initial_block': 'CPU:0', 'body': 'CPU:1', 'head': 'CPU:1'}`` puts each named child on its
device; ``device_map='auto'`` cuts the children, in order, into contiguous groups balanced by parameter bytes,
one group per listed device. Children not named in a mapping, and parameters of the root module itself, stay
on the first device of the map. A forward pre-hook on every child moves its tensor arguments to the child's
device, so activations follow the model; the parts must be called one after another (a skip connection that
adds tensors from two devices inside the root's ``forward`` is not moved).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from .devices import LogicalDevice
from .plan import AUTO, DevicePlan

__all__ = ['MoveInputs', 'auto_device_map', 'balanced_groups', 'place_module', 'remove_move_hooks']


_HALF = (torch.float16, torch.bfloat16)


class MoveInputs:
    """A forward pre-hook that moves a child's tensor arguments to its device (a class, so modules pickle).

    Half-precision activations made under autocast on another device type (a GPU part under ``amp``) reaching a
    part where autocast is off (a CPU part) are cast to that part's floating dtype: its layers could not take them.
    """

    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return _move(args, self.device, module), _move(kwargs, self.device, module)


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:               # torch < 2.4 takes no device type
        return torch.is_autocast_cpu_enabled() if device_type == 'cpu' else torch.is_autocast_enabled()


def _cast_dtype(module: nn.Module, device: torch.device) -> torch.dtype | None:
    """The dtype half-precision inputs arriving on ``device`` are cast to: ``None`` where autocast takes them
    (or the part computes in half precision itself), else the part's first floating parameter's dtype."""
    if _autocast_enabled(device.type):
        return None
    for param in module.parameters():
        if param.is_floating_point():
            return None if param.dtype in _HALF else param.dtype
    return None


def _move(value: Any, device: torch.device, module: nn.Module) -> Any:
    if isinstance(value, torch.Tensor):
        cast = _cast_dtype(module, device) if value.dtype in _HALF else None
        return value if value.device == device and cast is None else value.to(device, cast)
    if isinstance(value, (list, tuple)):
        return type(value)(_move(v, device, module) for v in value)
    if isinstance(value, dict):
        return {k: _move(v, device, module) for k, v in value.items()}
    return value


def remove_move_hooks(module: nn.Module) -> nn.Module:
    """Drop the input-moving hooks ``place_module`` put on the top-level children (in place); returns ``module``.

    A saved module must not carry them (loaded elsewhere, they would move inputs to devices of the old
    placement), and placing a module again must not stack a second hook.
    """
    for child in module.children():
        for key in [key for key, hook in child._forward_pre_hooks.items() if isinstance(hook, MoveInputs)]:
            del child._forward_pre_hooks[key]
            child._forward_pre_hooks_with_kwargs.pop(key, None)
    return module


def balanced_groups(sizes: Sequence[int], count: int) -> list[int]:
    """Cut ``sizes`` (in order) into ``min(count, len(sizes))`` contiguous non-empty groups minimizing the
    largest group total; returns each item's group number."""
    n, k = len(sizes), min(count, len(sizes))
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    inf = float('inf')
    # best[j][i]: the smallest possible largest-group total when the first i items form j groups
    best = [[inf] * (n + 1) for _ in range(k + 1)]
    cut = [[0] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0
    for j in range(1, k + 1):
        for i in range(j, n + 1):
            for start in range(j - 1, i):
                load = max(best[j - 1][start], prefix[i] - prefix[start])
                if load < best[j][i]:
                    best[j][i], cut[j][i] = load, start
    groups, stop = [0] * n, n
    for j in range(k, 0, -1):
        start = cut[j][stop]
        groups[start:stop] = [j - 1] * (stop - start)
        stop = start
    return groups


def auto_device_map(module: nn.Module, devices: Sequence[LogicalDevice]) -> tuple[tuple[str, LogicalDevice], ...]:
    """Assign the top-level children to ``devices`` in order, balancing parameter (and buffer) bytes."""
    children = list(module.named_children())
    if not children:
        raise ValueError(f"Expected a module with child modules for device_map='auto'. Received: "
                         f'{type(module).__name__} with no children; use a single device instead.')
    sizes = [sum(t.numel() * t.element_size() for t in (*child.parameters(), *child.buffers()))
             for _, child in children]
    groups = balanced_groups(sizes, len(devices))
    return tuple((name, devices[group]) for (name, _), group in zip(children, groups))


def _resolve(module: nn.Module, plan: DevicePlan) -> tuple[tuple[str, LogicalDevice], ...]:
    if plan.device_map == AUTO:
        return auto_device_map(module, plan.devices)
    children = dict(module.named_children())
    unknown = [part for part, _ in plan.device_map if part not in children]
    if unknown:
        raise ValueError(f'Expected device_map keys among the top-level children of {type(module).__name__}: '
                         f'{list(children)}. Received unknown parts: {unknown}.')
    return plan.device_map


def place_module(module: nn.Module, plan: DevicePlan) -> dict[str, LogicalDevice]:
    """Move each top-level child to its device and hook it to receive its inputs there (replacing the hooks of an
    earlier placement).

    Returns:
        The resolved map ``{child_name: device}`` (every child, unlisted ones on the first device).

    Raises:
        ValueError: a part name that is not a top-level child (the message lists the children).
    """
    parts = dict(_resolve(module, plan))
    first = plan.devices[0] if plan.device_map == AUTO else next(iter(parts.values()))
    remove_move_hooks(module).to(first.device)
    placement = {}
    for name, child in module.named_children():
        target = parts.get(name, first)
        child.to(target.device)
        child.register_forward_pre_hook(MoveInputs(target.device), with_kwargs=True)
        placement[name] = target
    return placement
