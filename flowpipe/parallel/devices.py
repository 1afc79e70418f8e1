"""Device specs: every accepted form of the ``device`` flag parsed into a tuple of logical devices.

Pure apart from one helper, :func:`cuda_device_count`, which tests replace (or bypass with ``num_gpus=``)
so that multi-GPU parsing is tested on a machine without GPUs.

Accepted forms of a spec (:func:`parse_devices` docstring has the details):

- ``None``: the best single device (the first GPU, else the CPU);
- a ``torch.device``;
- a string, case-insensitive, ``GPU`` meaning ``cuda``: ``'cpu'``, ``'CPU:1'``, ``'cuda:0'``, ``'GPU:1'``;
- an anchored glob over canonical names: ``'GPU:*'``, ``'GPU:[0-3]'`` (``'gpu:1'`` never matches ``cuda:10``);
  the only CPU name a glob finds is ``cpu:0``, so ``'CPU:*'`` is one replica (with a warning saying how to ask
  for several logical CPU devices);
- a multiplicity suffix ``xK`` placing K replicas on one device: ``'GPU:0x4'``, ``'CPU:0x2'``;
- a list or tuple of the above.
"""
from __future__ import annotations

import fnmatch
import re
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..errors import DeviceError

__all__ = ['LogicalDevice', 'available_devices', 'cuda_device_count', 'parse_device', 'parse_devices']

_GLOB_CHARS = re.compile(r'[*?\[]')
_MULTIPLICITY = re.compile(r'^(?P<base>.+?)x(?P<count>\d+)$')
_NAME = re.compile(r'^(?P<kind>cpu|cuda)(?::(?P<index>\d+))?$')


@dataclass(frozen=True)
class LogicalDevice:
    """One replica slot: a unique ``name`` and the ``torch.device`` it computes on.

    Logical CPU devices ``cpu:0``, ``cpu:1`` ... all compute on ``torch.device('cpu')``; the copies made by a
    multiplicity suffix are named ``cuda:0#0``, ``cuda:0#1`` ...
    """

    name: str
    device: torch.device

    def __str__(self) -> str:
        return self.name


def cuda_device_count() -> int:
    """Number of visible CUDA devices (the one impure helper; tests patch it)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def available_devices(num_gpus: int | None = None) -> tuple[str, ...]:
    """Canonical names a pattern can match: ``cuda:0`` ... ``cuda:{n-1}``, then ``cpu:0``."""
    count = cuda_device_count() if num_gpus is None else num_gpus
    return tuple(f'cuda:{i}' for i in range(count)) + ('cpu:0',)


def _describe_available(num_gpus: int) -> str:
    gpus = ', '.join(f'cuda:{i}' for i in range(num_gpus)) or 'no CUDA device is visible'
    return f'GPUs: {gpus}; CPU: cpu:0 (and logical CPU devices cpu:1, cpu:2, ...)'


def _canonical(text: str) -> str:
    """Lower-case, strip, and spell ``gpu`` as ``cuda``."""
    return re.sub(r'^gpu', 'cuda', text.strip().lower())


def _sort_key(name: str) -> tuple[int, int]:
    kind, _, index = name.partition(':')
    return (0 if kind == 'cuda' else 1, int(index or 0))


def _resolve_name(name: str, spec: Any, num_gpus: int) -> list[str]:
    """Turn one canonical name or pattern into canonical device names."""
    if _GLOB_CHARS.search(name):
        found = [dev for dev in available_devices(num_gpus) if fnmatch.fnmatchcase(dev, name)]
        if not found:
            raise DeviceError(f"Expected a device pattern that matches an available device. Received: {spec!r}. "
                              f"Available: {_describe_available(num_gpus)}.")
        return sorted(found, key=_sort_key)
    match = _NAME.match(name)
    if match is None:
        raise DeviceError(f"Expected a device name like 'cpu', 'CPU:1', 'cuda:0', 'GPU:1' or a pattern like 'GPU:*'. "
                          f"Received: {spec!r}. Available: {_describe_available(num_gpus)}.")
    kind, index = match['kind'], int(match['index'] or 0)
    if kind == 'cuda' and index >= num_gpus:
        raise DeviceError(f"Expected an available CUDA device. Received: {spec!r}. "
                          f"Available: {_describe_available(num_gpus)}.")
    return [f'{kind}:{index}']


def _torch_device(name: str) -> torch.device:
    kind, _, index = name.partition(':')
    return torch.device('cpu') if kind == 'cpu' else torch.device('cuda', int(index))


def _from_torch_device(spec: torch.device, num_gpus: int) -> list[str]:
    if spec.type not in ('cpu', 'cuda'):
        raise DeviceError(f"Expected a 'cpu' or 'cuda' torch.device. Received: {spec!r}. "
                          f"Available: {_describe_available(num_gpus)}.")
    return _resolve_name(f'{spec.type}:{spec.index or 0}', spec, num_gpus)


def parse_device(spec: Any, num_gpus: int | None = None) -> list[LogicalDevice]:
    """Parse one element of a device spec (a string, pattern or ``torch.device``) into logical devices.

    Raises:
        TypeError: ``spec`` is neither a string nor a ``torch.device``.
        DeviceError: nothing available matches; the message lists what is available.
    """
    count = cuda_device_count() if num_gpus is None else num_gpus
    if isinstance(spec, torch.device):
        return [LogicalDevice(name, _torch_device(name)) for name in _from_torch_device(spec, count)]
    if not isinstance(spec, str):
        raise TypeError(f"Expected a device as a string ('GPU:0', 'CPU:1', 'GPU:*') or a torch.device. "
                        f"Received: {spec!r} of type {type(spec).__name__}.")
    name, copies = _canonical(spec), 1
    multiple = _MULTIPLICITY.match(name)
    if multiple is not None:
        name, copies = multiple['base'], int(multiple['count'])
        if copies < 1:
            raise ValueError(f"Expected a positive multiplicity like 'GPU:0x4'. Received: {spec!r}.")
    resolved_names = _resolve_name(name, spec, count)
    if copies == 1 and resolved_names == ['cpu:0'] and _GLOB_CHARS.search(name) and fnmatch.fnmatchcase('cpu:1', name):
        # logical CPU devices are numbered by the user, not found: a pattern cannot ask for several of them
        warnings.warn(f"Device pattern {spec!r} matches the one CPU device, cpu:0: the model gets one replica. "
                      "For several logical CPU replicas list them, e.g. device=['CPU:0', 'CPU:1'], or write a "
                      "multiplicity, e.g. device='CPU:0x2'.", UserWarning, stacklevel=3)
    devices = []
    for resolved in resolved_names:
        if copies == 1:
            devices.append(LogicalDevice(resolved, _torch_device(resolved)))
        else:
            devices.extend(LogicalDevice(f'{resolved}#{k}', _torch_device(resolved)) for k in range(copies))
    return devices


def parse_devices(spec: Any = None, num_gpus: int | None = None) -> tuple[LogicalDevice, ...]:
    """Parse a whole ``device`` flag into a tuple of distinct logical devices, primary first.

    Args:
        spec: ``None`` (first GPU, else CPU), a string, pattern, ``torch.device``, or a list/tuple of them.
            Patterns are anchored globs over canonical names (``cuda:N``, ``cpu:0``), expanded in device order.
        num_gpus: the number of visible GPUs; ``None`` asks torch.

    Raises:
        TypeError: a spec of the wrong type.
        ValueError: an empty list, or the same device named twice (use ``'GPU:0x2'`` for two replicas on one).
        DeviceError: an element matches no available device.
    """
    count = cuda_device_count() if num_gpus is None else num_gpus
    if spec is None:
        name = 'cuda:0' if count > 0 else 'cpu:0'
        return (LogicalDevice(name, _torch_device(name)),)
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ValueError("Expected at least one device. Received: an empty device list. "
                             "Use device=None for the best single device.")
        elements: Sequence[Any] = spec
    else:
        elements = [spec]
    devices = [dev for element in elements for dev in parse_device(element, count)]
    names = [dev.name for dev in devices]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"Expected each device once. Received: {spec!r}, which names {repeated} more than once. "
                         f"For several replicas on one device write a multiplicity, e.g. 'GPU:0x2'.")
    return tuple(devices)
