"""What a research records about where it ran (``git_meta``, ``env_meta``) and its check that GPUs are free
(``memory_ratio``, ``n_gpu_checks``, ``gpu_check_delay``): batchflow's ``run`` arguments of the same names."""
from __future__ import annotations

import numbers
import os
import platform
import subprocess
import sys
import time
from typing import Any

__all__ = ['check_free_memory', 'environment', 'git_state']


def git_state(folder: str = '.') -> dict[str, Any]:
    """The commit, branch and uncommitted changes of the git repository holding ``folder`` (the working directory
    by default); ``{'error': ...}`` where there is no repository or no git."""
    def git(*args: str) -> str:
        return subprocess.run(['git', *args], cwd=folder, capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()
    try:
        return {'commit': git('rev-parse', 'HEAD'), 'branch': git('rev-parse', '--abbrev-ref', 'HEAD'),
                'changed_files': [line[3:] for line in git('status', '--porcelain').splitlines()],
                'root': git('rev-parse', '--show-toplevel')}
    except (OSError, subprocess.SubprocessError) as error:
        return {'error': f'{type(error).__name__}: {error}'.strip()}


def environment() -> dict[str, Any]:
    """Versions of Python, torch, numpy and flowpipe, the platform, the CPU count and the CUDA devices."""
    import numpy as np
    import torch

    from .. import __version__
    cuda = [torch.cuda.get_device_name(k) for k in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {'python': sys.version.split()[0], 'platform': platform.platform(), 'flowpipe': __version__,
            'torch': torch.__version__, 'numpy': np.__version__, 'cpu_count': os.cpu_count(), 'cuda_devices': cuda,
            'argv': list(sys.argv)}


def _cuda_indices(devices: Any) -> list[int]:
    from ..parallel.devices import parse_devices
    flat: list = []
    for device in devices if isinstance(devices, (list, tuple)) else [devices]:
        flat.extend(_flatten(device))
    devices = [logical.device for item in flat for logical in parse_devices(item)]
    return sorted({device.index or 0 for device in devices if device.type == 'cuda'})


def _flatten(item: Any) -> list:
    if isinstance(item, (list, tuple)):
        return [leaf for sub in item for leaf in _flatten(sub)]
    return [item]


def check_free_memory(devices: Any, ratio: Any, checks: Any = 3, delay: Any = 5) -> None:
    """Wait until every CUDA device among ``devices`` has at least ``ratio`` of its memory free, looking ``checks``
    times ``delay`` seconds apart; raise ``RuntimeError`` naming the busy devices if they stay busy.

    Raises:
        ValueError: a bad ``ratio``, ``checks`` or ``delay``, or ``devices`` without a CUDA device (there is
            nothing to check: the argument would be ignored).
    """
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real) or not 0 < ratio <= 1:
        raise ValueError(f"Expected memory_ratio as a number in (0, 1]: the share of each GPU's memory that must be "
                         f"free. Received: memory_ratio={ratio!r}.")
    if isinstance(checks, bool) or not isinstance(checks, numbers.Integral) or checks < 1:
        raise ValueError(f"Expected n_gpu_checks as an int >= 1. Received: n_gpu_checks={checks!r}.")
    if isinstance(delay, bool) or not isinstance(delay, numbers.Real) or delay < 0:
        raise ValueError(f"Expected gpu_check_delay as seconds >= 0. Received: gpu_check_delay={delay!r}.")
    indices = _cuda_indices(devices) if devices is not None else []
    if not indices:
        raise ValueError(f"Expected GPUs in devices with memory_ratio (it checks that their memory is free). "
                         f"Received: devices={devices!r}. Name GPUs (devices='GPU:*'), or leave memory_ratio=None.")
    import torch
    for attempt in range(int(checks)):
        busy = {}
        for index in indices:
            free, total = torch.cuda.mem_get_info(index)
            if free / total < ratio:
                busy[f'cuda:{index}'] = round(free / total, 3)
        if not busy:
            return
        if attempt + 1 < checks:
            time.sleep(delay)
    raise RuntimeError(f"Expected at least {ratio} of each GPU's memory free. Received: free shares {busy} after "
                       f"{checks} checks {delay} s apart. Free the GPUs, choose others in devices=, or lower "
                       f"memory_ratio.")
