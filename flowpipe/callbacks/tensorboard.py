"""``TensorBoardLogger``: the logged values of every epoch as TensorBoard scalars.

``tensorboard`` is an optional dependency (``pip install flowpipe[tensorboard]``).
"""
from __future__ import annotations

import contextlib
import numbers
import os
from typing import Any

from ..errors import add_note
from .base import Callback

__all__ = ['TensorBoardLogger']


class TensorBoardLogger(Callback):
    """Write every numeric logged value of each epoch (but ``epoch``) as a scalar at step ``epoch``, with torch's
    ``SummaryWriter`` into ``folder`` (rank 0 only); the writer is flushed at each epoch end."""
    order = 2

    def __init__(self, folder: str | os.PathLike):
        if not isinstance(folder, (str, os.PathLike)):
            raise TypeError(f"Expected folder as a str or os.PathLike. Received: folder={folder!r}")
        self.folder = os.fspath(folder)
        self._writer: Any = None

    def on_run_start(self, run: Any) -> None:
        if run.is_main and self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as error:
                raise ImportError("Expected the tensorboard package for TensorBoardLogger. Received: it is not "
                                  "installed. Install it with `pip install flowpipe[tensorboard]` (or "
                                  "`pip install tensorboard`).") from error
            self._writer = SummaryWriter(self.folder)

    def on_epoch_end(self, run: Any, epoch: int) -> None:
        if self._writer is None:
            return
        try:
            for name, value in run.logs.items():
                if name != 'epoch' and isinstance(value, numbers.Real):
                    self._writer.add_scalar(name, float(value), global_step=epoch)
            self._writer.flush()
        except OSError as error:            # a full disk, a quota, a folder gone: the writer is done for
            writer, self._writer = self._writer, None
            with contextlib.suppress(Exception):
                writer.close()
            add_note(error, f"Expected to write the TensorBoard events of epoch {epoch} into {self.folder!r}. "
                            f"Received: {error.strerror or error}. The events of earlier epochs are in the folder; "
                            "free space there (or log to another folder) and run again.")
            raise

    def on_run_end(self, run: Any) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __repr__(self) -> str:
        return f"TensorBoardLogger({self.folder!r})"
