"""``set_gpus``: choose the GPUs this process may use, before CUDA starts (batchflow's helper of the same name)."""
from __future__ import annotations

import os
import shutil
import subprocess

from .errors import DeviceError

__all__ = ['free_gpus', 'set_gpus']


def free_gpus() -> list[tuple[int, float]]:
    """``(index, free memory share)`` of every GPU ``nvidia-smi`` lists, most free first (empty without one)."""
    if shutil.which('nvidia-smi') is None:
        return []
    try:
        out = subprocess.run(['nvidia-smi', '--query-gpu=index,memory.free,memory.total',
                              '--format=csv,noheader,nounits'], capture_output=True, text=True, timeout=30,
                             check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.strip().splitlines():
        index, free, total = (float(part) for part in line.split(','))
        found.append((int(index), free / total if total else 0.0))
    return sorted(found, key=lambda item: -item[1])


def set_gpus(n: int = 1, min_free_memory: float = 0.9) -> list[int]:
    """Make the ``n`` GPUs with the most free memory (at least ``min_free_memory`` of it) the only visible ones.

    Sets ``CUDA_VISIBLE_DEVICES``, which takes effect only before CUDA starts in this process: call it first.
    Returns the chosen GPU indices.

    Raises:
        DeviceError: fewer than ``n`` GPUs qualify (the message lists what there is).
    """
    candidates = free_gpus()
    chosen = [index for index, free in candidates if free >= min_free_memory][:n]
    if len(chosen) < n:
        raise DeviceError(f"Expected {n} GPU(s) with at least {min_free_memory:.0%} free memory. Received: "
                          f"{[(index, round(free, 2)) for index, free in candidates] or 'no GPU (nvidia-smi found none)'}"
                          "; ask for fewer or lower min_free_memory, or run on the CPU ('CPU:0')")
    os.environ['CUDA_VISIBLE_DEVICES'] = ','.join(map(str, chosen))
    return chosen
