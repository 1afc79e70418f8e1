"""Example inputs, channel expressions and padding: what every layer of the layout language builds from.

A layer is made from an example of its input (a tensor, or a shape with the batch axis), so that it reads the
number of channels and the spatial size itself: ``Conv(inputs=x, channels=16)`` needs no ``in_channels``.
"""
from __future__ import annotations

import math
import re
import weakref
from typing import Any, Sequence

import torch
from torch import nn

__all__ = ['as_example', 'conv_padding', 'num_channels', 'num_spatial', 'remember_output', 'resolve_channels',
           'run_example', 'to_tuple', 'transposed_padding']

#: module -> (the example it was built on, its output): a part made by a parent is not run again to size the next
_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def remember_output(module: nn.Module, example: Any, output: Any) -> None:
    """Keep what ``module`` gave on ``example`` while it was built, for the ``run_example`` that sizes the next
    part (taken once; a module nobody asks about keeps it only as long as it lives)."""
    _BUILT[module] = (example, output)


def as_example(inputs: Any) -> torch.Tensor:
    """A tensor to build from: ``inputs`` itself, or zeros of the shape ``inputs`` (batch axis included)."""
    if isinstance(inputs, torch.Tensor):
        return inputs
    if isinstance(inputs, (tuple, list, torch.Size)) and inputs and all(isinstance(size, int) for size in inputs):
        return torch.zeros(tuple(inputs))
    raise TypeError(f"Expected an example input: a tensor or its shape with the batch axis, e.g. (2, 3, 32, 32). "
                    f"Received: inputs={inputs!r}.")


def run_example(module: nn.Module, example: Any) -> Any:
    """``module(example)`` without gradients, in evaluation mode (no batch-norm statistics change, no random
    numbers are drawn), the module's mode restored: the shapes a network is built from cost no state. A module
    that remembered its output on this very example while being built gives it without running again."""
    built = _BUILT.pop(module, None)
    if built is not None and built[0] is example:
        return built[1]
    modes = [(child, child.training) for child in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            return module(example)
    finally:
        for child, training in modes:
            child.training = training


def num_channels(example: torch.Tensor) -> int:
    """Channels of an example (axis 1, channels first)."""
    if example.dim() < 2:
        raise ValueError(f"Expected an input with a channel axis (batch, channels, ...). Received: shape "
                         f"{tuple(example.shape)}. Add a channel axis or flatten with 'f' first.")
    return int(example.shape[1])


def num_spatial(example: torch.Tensor, letter: str) -> int:
    """Spatial axes of an example: 1, 2 or 3 (what the layer of ``letter`` works on)."""
    dims = example.dim() - 2
    if dims not in (1, 2, 3):
        raise ValueError(f"Expected an input of 1, 2 or 3 spatial axes (batch, channels, ...) for the layout letter "
                         f"{letter!r}. Received: shape {tuple(example.shape)}.")
    return dims


_SAME = re.compile(r'^\s*(?:(\d+(?:\.\d+)?)\s*\*\s*)?(?:same|S)\s*(?:(\*|//|/)\s*(\d+(?:\.\d+)?))?\s*$')


def resolve_channels(value: Any, in_channels: int, what: str = 'channels') -> int:
    """A number of channels: an int, or batchflow's expression over the input's channels: ``'same'`` (or
    ``'S'``), ``'same*2'``, ``'same//2'``, ``'same/4'``, ``'2*same'``."""
    if isinstance(value, str):
        match = _SAME.match(value)
        if match is None:
            raise ValueError(f"Expected {what} as an int or an expression of 'same' ('same', 'same*2', 'same//2'). "
                             f"Received: {what}={value!r}.")
        factor, op, number = match.groups()
        result = in_channels * float(factor or 1)
        if op == '*':
            result *= float(number)
        elif op:
            result = result // float(number) if op == '//' else result / float(number)
        value = int(result)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Expected {what} as a positive int or an expression of 'same'. Received: {what}={value!r}.")
    return value


def to_tuple(value: Any, size: int) -> tuple:
    """``value`` repeated ``size`` times, or ``value`` itself when it is already a sequence of ``size``."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != size:
            raise ValueError(f"Expected one value or {size} (one per spatial axis). Received: {value!r}.")
        return tuple(value)
    return (value,) * size


def conv_padding(padding: Any, spatial: Sequence[int], kernel: Any, stride: Any, dilation: Any = 1) -> Any:
    """Padding for a convolution or a pooling: ``'same'`` gives an output of ``ceil(size / stride)`` per axis
    (torch pads both sides alike: where that needs an odd total, the nearest size above), ``'valid'`` none,
    anything else is passed on as it is."""
    if padding == 'valid':
        return 0
    if padding != 'same':
        return padding
    n = len(spatial)
    result = []
    for size, k, s, d in zip(spatial, to_tuple(kernel, n), to_tuple(stride, n), to_tuple(dilation, n)):
        span = d * (k - 1) + 1
        total = max((math.ceil(size / s) - 1) * s + span - size, 0)
        low = total // 2
        result.append(low if (size + 2 * low - span) // s + 1 >= math.ceil(size / s) else low + 1)
    return tuple(result)


def transposed_padding(kernel: Any, stride: Any, dilation: Any, n: int) -> tuple[tuple, tuple]:
    """``(padding, output_padding)`` that make a transposed convolution's output ``size * stride`` per axis."""
    padding, output = [], []
    for k, s, d in zip(to_tuple(kernel, n), to_tuple(stride, n), to_tuple(dilation, n)):
        excess = d * (k - 1) + 1 - s             # out = in * s + excess - 2 * padding + output_padding
        pad = max(math.ceil(excess / 2), 0)
        padding.append(pad)
        output.append(2 * pad - excess)
    return tuple(padding), tuple(output)
