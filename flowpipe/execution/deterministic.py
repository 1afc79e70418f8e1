"""``deterministic``: torch's switches for bit-identical GPU results, on for a block and restored after it.

On a CPU flowpipe's runs repeat bit for bit with the same seeds. On a GPU some kernels (cuDNN's autotuned
convolutions, atomics in scatter/index_add backward, cuBLAS with several workspaces) may sum in another order from
one run to the next; ``deterministic(True)`` turns on what PyTorch documents for reproducibility:

- ``torch.use_deterministic_algorithms(True)``: an operation with no deterministic kernel raises
  (``'warn'``: warns instead, as ``warn_only=True``);
- ``torch.backends.cudnn.deterministic = True`` and ``torch.backends.cudnn.benchmark = False``;
- ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` where it is not set: cuBLAS reads it once per process, at its first
  matrix product, so set it in the environment of the process when CUDA may already be in use there (a
  ``RuntimeWarning`` says so when CUDA was initialized before the block).

Everything is put back as it was when the block ends. torch is imported only when the switches are turned on.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Iterator

__all__ = ['CUBLAS_WORKSPACE', 'check_deterministic', 'deterministic']

CUBLAS_VARIABLE = 'CUBLAS_WORKSPACE_CONFIG'
CUBLAS_WORKSPACE = ':4096:8'


def check_deterministic(value: Any) -> None:
    """Raise for a ``deterministic`` argument other than ``False``, ``True`` or ``'warn'``."""
    if isinstance(value, bool) or (isinstance(value, str) and value == 'warn'):
        return
    error = ValueError if isinstance(value, str) else TypeError
    raise error(f"Expected deterministic to be False, True or 'warn'. Received: deterministic={value!r}. Pass True "
                f"to raise on an operation with no deterministic kernel, 'warn' to warn instead.")


@contextlib.contextmanager
def deterministic(mode: bool | str = True) -> Iterator[None]:
    """Inside the block torch uses deterministic algorithms (``mode``: ``True``, ``'warn'``, or ``False`` for no
    change); see the module's docstring for the switches and the cuBLAS variable."""
    check_deterministic(mode)
    if mode is False:
        yield
        return
    import torch
    cudnn = torch.backends.cudnn
    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              cudnn.deterministic, cudnn.benchmark, os.environ.get(CUBLAS_VARIABLE))
    if before[4] is None:
        if torch.cuda.is_initialized():
            warnings.warn(f"deterministic: CUDA was initialized before {CUBLAS_VARIABLE} was set: cuBLAS may keep "
                          f"the workspace it chose then. Set {CUBLAS_VARIABLE}={CUBLAS_WORKSPACE} in the "
                          f"environment before the process starts.", RuntimeWarning, stacklevel=3)
        os.environ[CUBLAS_VARIABLE] = CUBLAS_WORKSPACE
    torch.use_deterministic_algorithms(True, warn_only=mode == 'warn')
    cudnn.deterministic, cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        cudnn.deterministic, cudnn.benchmark = before[2], before[3]
        if before[4] is None:
            os.environ.pop(CUBLAS_VARIABLE, None)
