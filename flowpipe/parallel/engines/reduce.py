"""Gradient reduction and state broadcast between replicas, coalesced: a few operations per step, not one per
tensor and replica.

A ResNet18 has 62 parameter tensors and 60 buffers; moving them one at a time costs a copy (and on a GPU a
kernel launch) per tensor and replica. Here:

- replicas on the primary's device (logical CPU devices, ``'GPU:0x4'``) are summed and copied with torch's
  multi-tensor operations (``torch._foreach_add_`` / ``_foreach_copy_``): no extra memory, a few launches;
- replicas on other devices move in flat buckets (tensors of one dtype and device up to ``BUCKET_BYTES``
  flattened into one buffer): one copy per bucket and device. When every device is a distinct GPU, torch's
  ``reduce_add_coalesced`` / ``broadcast_coalesced`` do this (with NCCL where available).

Sums run in replica order, element by element, exactly as the per-tensor references do (``reduce_per_tensor``,
``average_per_tensor``, ``broadcast_per_tensor``, kept for tests and ``bench/replicas.py``): the results are
bit-identical on a CPU.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

__all__ = ['BUCKET_BYTES', 'average_buffers', 'average_per_tensor', 'broadcast', 'broadcast_per_tensor', 'buckets',
           'reduce_gradients', 'reduce_per_tensor']

BUCKET_BYTES = 10 * 2 ** 20     # torch.cuda.comm's default bucket size

Tensors = Sequence[torch.Tensor]
Params = Sequence[Sequence[torch.nn.Parameter]]


def buckets(tensors: Tensors, limit: int = BUCKET_BYTES) -> list[list[int]]:
    """Indexes of ``tensors`` in buckets of one dtype and device, in order of their first tensor; a bucket is
    closed once it holds ``limit`` bytes or more."""
    done, open_buckets = [], {}
    for index, tensor in enumerate(tensors):
        key = (tensor.dtype, tensor.device)
        bucket, size = open_buckets.pop(key, ([], 0))
        bucket.append(index)
        size += tensor.numel() * tensor.element_size()
        if size >= limit:
            done.append(bucket)
        else:
            open_buckets[key] = (bucket, size)
    done.extend(bucket for bucket, _ in open_buckets.values())
    return sorted(done, key=lambda bucket: bucket[0])


def _distinct_gpus(devices: Sequence[torch.device]) -> bool:
    return all(device.type == 'cuda' for device in devices) and len(set(devices)) == len(devices)


def _moved(tensors: Tensors, device: torch.device, flatten: bool) -> Tensors:
    """``tensors`` on ``device``: as they are when already there (unless ``flatten``), else through one flat
    buffer (one copy for the whole bucket)."""
    if not flatten and all(tensor.device == device for tensor in tensors):
        return tensors
    return _unflatten_dense_tensors(_flatten_dense_tensors(tensors).to(device), tensors)


@torch.no_grad()
def reduce_gradients(params: Params, active: Sequence[int], devices: Sequence[torch.device], *,
                     flatten: bool = False) -> None:
    """Make ``params[0][i].grad`` the sum, in replica order, of the ``active`` replicas' gradients of parameter i.

    A parameter with no gradient on any active replica keeps ``None``; a gradient missing on some replicas counts
    as zero. ``devices[r]`` is replica r's device. ``flatten=True`` moves every replica's gradients through flat
    buffers, even on the primary's device (what happens across devices; tests and benchmarks use it on a CPU).
    """
    primary = params[0]
    if tuple(active) == (0,):
        return
    present = [i for i in range(len(primary)) if any(params[r][i].grad is not None for r in active)]
    native = not flatten and 0 in active and _distinct_gpus([devices[r] for r in active])
    for bucket in buckets([primary[i] for i in present]):
        indexes = [present[j] for j in bucket]
        grads = [[_grad_or_zeros(params[r][i], primary[i]) for i in indexes] for r in active]
        if native:
            _set_grads([primary[i] for i in indexes],
                       torch.cuda.comm.reduce_add_coalesced(grads, destination=devices[0].index))
            continue
        first = _moved(grads[0], devices[0], flatten)
        # the sum accumulates in the primary's own gradients; another replica's are cloned, not changed
        total = list(first) if active[0] == 0 or first is not grads[0] else [grad.clone() for grad in first]
        for replica_grads in grads[1:]:
            torch._foreach_add_(total, list(_moved(replica_grads, devices[0], flatten)))
        _set_grads([primary[i] for i in indexes], total)


def _grad_or_zeros(param: torch.nn.Parameter, like: torch.Tensor) -> torch.Tensor:
    return param.grad if param.grad is not None else torch.zeros_like(like, device=param.device)


def _set_grads(params: Sequence[torch.nn.Parameter], sums: Tensors) -> None:
    for param, value in zip(params, sums):
        param.grad = value if value.stride() == param.stride() else torch.empty_like(param).copy_(value)


@torch.no_grad()
def average_buffers(buffers: Sequence[Tensors], active: Sequence[int], *, flatten: bool = False) -> None:
    """The primary's floating buffers become the mean over the ``active`` replicas' (integer ones: the first active
    replica's), bucket by bucket; ``flatten`` as in ``reduce_gradients``."""
    primary = buffers[0]
    if tuple(active) == (0,) or not primary:
        return
    for bucket in buckets(primary):
        targets = [primary[j] for j in bucket]
        device = targets[0].device
        values = [_moved([buffers[r][j] for j in bucket], device, flatten) for r in active]
        if targets[0].is_floating_point() and len(active) > 1:
            mean = torch.stack([_flatten_dense_tensors(each) for each in values]).mean(dim=0)
            torch._foreach_copy_(targets, list(_unflatten_dense_tensors(mean, targets)))
        elif active[0] != 0:
            torch._foreach_copy_(targets, list(values[0]))


@torch.no_grad()
def broadcast(tensors: Sequence[Tensors], devices: Sequence[torch.device], *, flatten: bool = False) -> None:
    """Copy the primary's ``tensors[0]`` into every other replica's ``tensors[r]``, bucket by bucket: replicas on
    one device share one copy of each bucket; ``flatten`` as in ``reduce_gradients``."""
    primary = tensors[0]
    if len(tensors) == 1 or not primary:
        return
    native = not flatten and _distinct_gpus(devices)
    for bucket in buckets(primary):
        sources = [primary[j] for j in bucket]
        if native:
            copies = torch.cuda.comm.broadcast_coalesced(sources, [device.index for device in devices])
        else:
            by_device: dict[torch.device, Tensors] = {}
            for device in devices[1:]:
                if device not in by_device:
                    by_device[device] = _moved(sources, device, flatten)
            copies = [sources] + [by_device[device] for device in devices[1:]]
        for replica in range(1, len(tensors)):
            torch._foreach_copy_([tensors[replica][j] for j in bucket], list(copies[replica]))


@torch.no_grad()
def reduce_per_tensor(params: Params, active: Sequence[int]) -> None:
    """The reference of ``reduce_gradients``: one copy and one addition per tensor and replica."""
    for i, param in enumerate(params[0]):
        for replica in active:
            grad = params[replica][i].grad
            if replica == 0 or grad is None:
                continue
            if param.grad is None:
                param.grad = grad.to(param.device, copy=True)
            else:
                param.grad.add_(grad.to(param.device))


@torch.no_grad()
def average_per_tensor(buffers: Sequence[Tensors], active: Sequence[int]) -> None:
    """The reference of ``average_buffers``: one stack and mean (or copy) per buffer."""
    for j, buffer in enumerate(buffers[0]):
        values = [buffers[r][j].to(buffer.device) for r in active]
        buffer.copy_(torch.stack(values).mean(dim=0) if buffer.is_floating_point() and len(values) > 1 else values[0])


@torch.no_grad()
def broadcast_per_tensor(tensors: Sequence[Tensors]) -> None:
    """The reference of ``broadcast``: one copy per tensor and replica."""
    for replica in range(1, len(tensors)):
        for target, source in zip(tensors[replica], tensors[0]):
            target.copy_(source)
