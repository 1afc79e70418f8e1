"""The checks of ``make_plan``'s device flags: ``microbatch``, ``device_weights``, ``device_map`` and a rank's one
device in a distributed job."""
from __future__ import annotations

import numbers
from typing import Any, Mapping, Sequence

from .devices import LogicalDevice, cuda_device_count, parse_devices
from .distributed import World

__all__ = ['check_microbatch', 'check_weights', 'parse_device_map', 'rank_device']


def check_microbatch(microbatch: Any) -> int | None:
    if microbatch is None or microbatch is False:
        return None
    if isinstance(microbatch, bool) or not isinstance(microbatch, numbers.Integral):
        raise TypeError(f'Expected microbatch as an int (items per micro-batch) or None/False to turn it off. '
                        f'Received: {microbatch!r} of type {type(microbatch).__name__}.')
    if microbatch < 1:
        raise ValueError(f'Expected a positive microbatch (items per micro-batch). Received: {microbatch!r}. '
                         f'Use None or False to turn micro-batches off.')
    return int(microbatch)


def check_weights(weights: Any, devices: Sequence[LogicalDevice]) -> tuple[float, ...] | None:
    if weights is None:
        return None
    if not isinstance(weights, (list, tuple)):
        raise TypeError(f'Expected device_weights as a list of numbers, one per device. '
                        f'Received: {weights!r} of type {type(weights).__name__}.')
    bad = [w for w in weights if isinstance(w, bool) or not isinstance(w, numbers.Real)]
    if bad:
        raise TypeError(f'Expected device_weights to be numbers. Received: {weights!r} (not numbers: {bad!r}).')
    if len(weights) != len(devices) or any(not w > 0 for w in weights):
        raise ValueError(f'Expected one positive weight per device ({[d.name for d in devices]}). '
                         f'Received: device_weights={list(weights)!r}.')
    return tuple(float(w) for w in weights)


def parse_device_map(device_map: Mapping, device: Any, num_gpus: int | None):
    if device is not None:
        raise ValueError(f'Expected the devices of a model-parallel model in device_map only. Received: '
                         f'device={device!r} together with device_map={dict(device_map)!r}. Drop device, or use '
                         f"device_map='auto' to balance the model over device.")
    if not device_map:
        raise ValueError('Expected device_map to name at least one part. Received: an empty mapping.')
    parts = []
    for part, spec in device_map.items():
        if not isinstance(part, str):
            raise TypeError(f'Expected device_map keys to be child-module names. Received: {part!r}.')
        found = parse_devices(spec, num_gpus)
        if len(found) != 1:
            raise ValueError(f'Expected one device per part in device_map. Received: {part!r}: {spec!r}, which '
                             f'is {len(found)} devices ({[d.name for d in found]}).')
        parts.append((part, found[0]))
    devices = tuple(dict.fromkeys(dev for _, dev in parts))
    return tuple(parts), devices


def rank_device(device: Any, world: World, num_gpus: int | None) -> LogicalDevice:
    """This rank's one device: a CUDA spec names the GPUs the node's ranks share, the CPU is every rank's."""
    devices = parse_devices(device, num_gpus)
    cuda = [dev for dev in devices if dev.device.type == 'cuda']
    if cuda and len(cuda) == len(devices) and not any('#' in dev.name for dev in devices):
        if len(devices) == 1:       # one GPU named (or the default): each rank of the node takes its own
            count = cuda_device_count() if num_gpus is None else num_gpus
            return parse_devices(f'cuda:{world.local_rank % count}', count)[0]
        return devices[world.local_rank % len(devices)]
    if len(devices) == 1:
        return devices[0]
    raise ValueError(f'Expected one device per process in a distributed job ({world}): replicas inside a process '
                     f'cannot be combined with ranks. Received: device={device!r}, which is '
                     f'{[dev.name for dev in devices]}. Use device=\'cpu\', or \'GPU:*\' to give each rank its own '
                     f'GPU, and start one process per replica instead.')
