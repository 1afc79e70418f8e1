"""Output from rank 0 only: ``is_main``, ``print0`` and the warnings the run's callbacks emit (``warn0``).

Under ``torchrun`` (or ``flowpipe.parallel.launch``) every rank runs the same script, so a plain ``print`` shows
once per rank. ``print0`` prints on rank 0 only, and prints as ``print`` does in a process that is not part of a
distributed job. A process belongs to a job once its group is initialized or its ``WORLD_SIZE`` is above 1
(``torchrun`` sets it before the script starts), so ``print0`` already holds at the top of a script.
"""
from __future__ import annotations

import os
import sys
import warnings
from typing import Any

__all__ = ['is_main', 'print0', 'warn0']


def is_main() -> bool:
    """Whether this process is rank 0 of a distributed job, or belongs to none: the process that prints, shows
    progress bars and writes files.

    Cheap and torch-free outside a job (torch is imported only when ``WORLD_SIZE`` > 1 or torch is loaded).
    """
    if os.environ.get('WORLD_SIZE', '').strip() in ('', '0', '1') and 'torch.distributed' not in sys.modules:
        return True
    from .parallel import distributed
    return distributed.is_main()


def print0(*values: Any, **kwargs: Any) -> None:
    """``print(*values, **kwargs)`` on rank 0 only (everywhere outside a distributed job)."""
    if is_main():
        print(*values, **kwargs)


def warn0(message: str, category: type[Warning] = UserWarning, stacklevel: int = 2) -> None:
    """``warnings.warn`` on rank 0 only: a warning every rank would repeat (a callback's, about values all ranks
    share) shows once."""
    if is_main():
        warnings.warn(message, category, stacklevel=stacklevel + 1)
