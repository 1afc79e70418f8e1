"""Gradient clipping of the full-batch gradient: the checks of ``clip_grad_norm`` and ``clip_grad_value``, and
``clip``, which ``Engine.clip_gradients`` applies once per step, after the reduction and the precision's
unscaling, so the result does not depend on how devices and micro-batches split the batch."""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import torch

__all__ = ['check_clip_value', 'check_max_norm', 'clip', 'clip_over_group']


def check_max_norm(value: Any) -> float | None:
    """``clip_grad_norm`` as a float: ``None`` (no clipping) or a positive number, else a clear error."""
    return None if value is None else _positive_bound(value, 'clip_grad_norm', 'the largest total gradient norm', '')


def check_clip_value(value: Any, key: str = 'clip_grad_value') -> float | Callable | None:
    """``clip_grad_value`` as a float (the largest absolute gradient entry), a callable ``grad -> grad`` applied to
    each parameter's gradient, or ``None`` (no clipping); else a clear error naming ``key``."""
    if value is None or callable(value):
        return value
    return _positive_bound(value, key, 'the largest absolute gradient value', ', a callable grad -> grad,')


def _positive_bound(value: Any, key: str, meaning: str, alternatives: str) -> float:
    expected = f'Expected {key} as a positive number ({meaning}){alternatives} or None.'
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f'{expected} Received: {value!r} of type {type(value).__name__}.')
    if not value > 0:
        raise ValueError(f'{expected} Received: {key}={value!r}. Use None to turn clipping off.')
    return float(value)


def clip(params: list[torch.Tensor], norm: float | None = None, value: float | Callable | None = None) -> None:
    """Clip the gradients of ``params`` in place: by ``value`` first (a bound on each entry, or a function
    ``grad -> grad`` of each gradient, whose ``None`` leaves it as it is), then to the total 2-norm ``norm``."""
    if callable(value):
        for param in params:
            if param.grad is not None:
                clipped = value(param.grad)
                if clipped is not None:
                    param.grad = clipped
    elif value is not None:
        torch.nn.utils.clip_grad_value_(params, value)
    if norm is not None:
        torch.nn.utils.clip_grad_norm_(params, norm)


@torch.no_grad()
def clip_over_group(params: list[torch.Tensor], group: Any, norm: float | None = None,
                    value: float | Callable | None = None) -> None:
    """``clip`` where ``params`` are one rank's part of a network whose other parts lie on the ranks of ``group``
    (a pipeline's stages): by ``value`` on each part, then to the total 2-norm ``norm`` over every part's gradient
    (one all-reduce over ``group``), as ``clip_grad_norm_`` does on the whole network."""
    clip(params, None, value)
    if norm is None:
        return
    grads = [param.grad for param in params if param.grad is not None]
    squares = torch.zeros((), dtype=torch.float64)
    for grad in grads:
        squares += grad.detach().double().pow(2).sum().cpu()
    torch.distributed.all_reduce(squares, group=group)
    coefficient = min(1.0, norm / (math.sqrt(float(squares)) + 1e-6))
    if coefficient < 1.0:
        torch._foreach_mul_(grads, coefficient)
