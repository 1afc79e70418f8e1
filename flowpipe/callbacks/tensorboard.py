"""``TensorBoardLogger``: the logged values of every epoch as TensorBoard scalars.

``tensorboard`` is an optional dependency (``pip install flowpipe[tensorboard]``).
"""
from __future__ import annotations

import contextlib
import os
from typing import Any

from ..errors import add_note
from .logger import Logger, numeric

__all__ = ['TensorBoardLogger']


class TensorBoardLogger(Logger):
    """Write every numeric logged value of each epoch (but ``epoch``) as a scalar at step ``epoch``, with torch's
    ``SummaryWriter`` into ``folder`` (rank 0 only); the writer is flushed at each epoch end."""

    def __init__(self, folder: str | os.PathLike):
        if not isinstance(folder, (str, os.PathLike)):
            raise TypeError(f"Expected folder as a str or os.PathLike. Received: folder={folder!r}")
        if os.path.exists(folder) and not os.path.isdir(folder):
            raise ValueError(f"Expected TensorBoardLogger's folder to be a folder. Received: folder={folder!r}, an "
                             "existing file. Pass the path of a folder (a missing one is made), or move the file away.")
        super().__init__()
        self.folder = os.fspath(folder)
        self._writer: Any = None

    def open(self, run: Any, run_id: str | None) -> tuple[str | None, int]:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise ImportError("Expected the tensorboard package for TensorBoardLogger. Received: it is not "
                              "installed. Install it with `pip install flowpipe[tensorboard]` (or "
                              "`pip install tensorboard`).") from error
        self._writer = SummaryWriter(self.folder)
        return run_id, -1

    def write(self, epoch: int, logs: dict[str, Any]) -> None:
        try:
            for name, value in numeric(logs).items():
                self._writer.add_scalar(name, value, global_step=epoch)
            self._writer.flush()
        except OSError as error:            # a full disk, a quota, a folder gone: the writer is done for
            writer, self._writer = self._writer, None
            with contextlib.suppress(Exception):
                writer.close()
            add_note(error, f"Expected to write the TensorBoard events of epoch {epoch} into {self.folder!r}. "
                            f"Received: {error.strerror or error}. The events of earlier epochs are in the folder; "
                            "free space there (or log to another folder) and run again.")
            raise

    def close(self, error: BaseException | None) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:                  # None: a failed write closed it
            writer.close()

    def __repr__(self) -> str:
        return f"TensorBoardLogger({self.folder!r})"
