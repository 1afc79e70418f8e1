"""How a research's ``devices`` are divided between worker slots and branches: ``split_devices``.

There are ``workers * branches`` slots (a task runs its branches in one worker slot). Accepted forms:

- ``None``: no ``device`` key is added to the configs;
- a device or a flat list of devices (``'GPU:*'``-style patterns are expanded first): with at least as many
  devices as slots, each slot gets ``len // slots`` consecutive devices, together (an experiment that needs
  several devices gets them all); with fewer, consecutive slots share a device (``['CPU:0', 'CPU:1']`` over 4
  slots gives ``CPU:0, CPU:0, CPU:1, CPU:1``);
- a list of ``slots`` lists: one share per slot, as given;
- a list of ``workers`` lists of ``branches`` lists: one share per worker and branch, as given.

An experiment's ``C('device')`` is its share: the device itself when the share has one, else the list.
"""
from __future__ import annotations

import re
from typing import Any

__all__ = ['split_devices']

_GLOB = re.compile(r'[*?\[]')


def _expand(device: Any) -> list:
    if isinstance(device, str) and _GLOB.search(device):
        from ..parallel.devices import parse_devices
        return [str(item) for item in parse_devices(device)]
    return [device]


def _share(devices: list) -> Any:
    return devices[0] if len(devices) == 1 else list(devices)


def split_devices(devices: Any, workers: int, branches: int) -> list[list[Any]]:
    """``shares[worker][branch]``: the device (or list of devices) each slot's experiments get.

    Raises:
        ValueError: nested lists whose shape does not match ``workers`` and ``branches``.
    """
    if devices is None:
        return [[None] * branches for _ in range(workers)]
    if not isinstance(devices, (list, tuple)):
        devices = [devices]
    if not devices:
        raise ValueError("Expected devices to name at least one device. Received: an empty list.")
    slots = workers * branches
    if all(isinstance(item, (list, tuple)) for item in devices):
        if len(devices) == workers and all(isinstance(branch, (list, tuple)) and len(branch) == branches and
                                           all(isinstance(share, (list, tuple)) for share in branch)
                                           for branch in devices):
            return [[_share(list(share)) for share in worker] for worker in devices]
        if len(devices) == slots:
            flat = [_share(list(share)) for share in devices]
            return [flat[w * branches:(w + 1) * branches] for w in range(workers)]
        raise ValueError(f"Expected nested devices as {slots} lists (one per worker slot and branch) or "
                         f"{workers} lists of {branches} lists. Received: {devices!r}.")
    flat = [name for device in devices for name in _expand(device)]
    if len(flat) >= slots:
        per = len(flat) // slots
        shares = [_share(flat[k * per:(k + 1) * per]) for k in range(slots)]
    else:
        shares = [flat[k * len(flat) // slots] for k in range(slots)]
    return [shares[w * branches:(w + 1) * branches] for w in range(workers)]
