"""Moving a batch's components to a device ahead of the model step: ``Batch.to_device``.

Under ``run(..., prefetch=n)`` actions before a locked ``train_model`` run in the prefetch threads, batches ahead
of the one that trains; ``to_device`` there copies the next batches to the GPU while the current one computes.
Towards a GPU each tensor goes through pinned (page-locked) host memory and is copied with ``non_blocking=True``
on a side stream of the prefetch thread; the thread then waits for its copies to land (the training thread does
not wait), so the tensors it hands over are complete on any stream. Towards the CPU nothing is copied: numpy
arrays become tensors sharing their memory.
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np
import torch

from ..torchutils import to_tensor

__all__ = ['device_of_spec', 'movable', 'to_device']

_streams = threading.local()        # one copy stream per thread and device


def device_of_spec(device: Any) -> torch.device:
    """One torch device from a flowpipe device spec (``'GPU:0'``, ``'cpu'``, ``'CPU:1'``, a ``torch.device``)."""
    from ..parallel import parse_devices
    devices = parse_devices(device)
    if len(devices) != 1:
        raise ValueError(f"Expected one device for to_device. Received: device={device!r}, which is {len(devices)} "
                         f"devices ({[d.name for d in devices]}). Give the model's primary device.")
    return devices[0].device


def movable(value: Any) -> bool:
    """Whether a component value is one numeric array or tensor (object arrays and other values stay)."""
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, np.ndarray) and (np.issubdtype(value.dtype, np.number) or value.dtype == bool)


def _copy_stream(device: torch.device) -> Any:
    key = f'stream_{device}'
    stream = getattr(_streams, key, None)
    if stream is None:
        stream = torch.cuda.Stream(device)
        setattr(_streams, key, stream)
    return stream


def to_device(values: dict[str, Any], device: torch.device, pin_memory: bool) -> dict[str, torch.Tensor]:
    """``values`` (arrays or tensors) as tensors on ``device``; layouts (strides) are kept.

    Towards a GPU: through pinned host memory when ``pin_memory``, copied non-blocking on this thread's copy
    stream, and complete when this returns.
    """
    tensors = {name: to_tensor(value, name) for name, value in values.items()}
    if device.type != 'cuda':
        return {name: tensor.to(device) for name, tensor in tensors.items()}
    stream = _copy_stream(device)
    # the destination is allocated on the device's current stream (where the model computes), so the caching
    # allocator never hands its memory to another stream while the step still reads it
    moved = {name: torch.empty_like(tensor, device=device) for name, tensor in tensors.items()}
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for name, tensor in tensors.items():
            source = tensor.pin_memory() if pin_memory and tensor.device.type == 'cpu' else tensor
            moved[name].copy_(source, non_blocking=True)
    stream.synchronize()        # this (prefetch) thread waits; the copies overlapped the current step
    return moved
