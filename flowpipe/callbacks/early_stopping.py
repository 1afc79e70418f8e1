"""``EarlyStopping``: stop a run when a monitored value has stopped improving (Keras's rule)."""
from __future__ import annotations

import math
import numbers
from typing import Any

from .base import Callback, check_mode, check_number, monitored

__all__ = ['EarlyStopping']


class EarlyStopping(Callback):
    """Stop the run at the end of the epoch after ``patience`` epochs without improvement of ``monitor``.

    An epoch improves when its value is below the best by more than ``min_delta`` (``mode='min'``; above it by
    more for ``'max'``): the best is then that value and the count of epochs waited goes back to 0; otherwise the
    count grows, and the run stops when it reaches ``patience`` (``patience=0``: at the first epoch that does not
    improve). ``stopped_epoch`` is that epoch (0-based), ``None`` while the run has not been stopped.

    Args:
        monitor: the logged value to watch (``'val/loss'``).
        mode: ``'min'`` or ``'max'``.
        patience: epochs without improvement before stopping.
        min_delta: the least change that counts as an improvement.
    """

    def __init__(self, monitor: str = 'val/loss', mode: str = 'min', patience: int = 0, min_delta: float = 0.0):
        if isinstance(patience, bool) or not isinstance(patience, numbers.Integral) or patience < 0:
            raise ValueError(f"Expected patience as an int >= 0. Received: patience={patience!r}")
        min_delta = check_number('EarlyStopping', 'min_delta', min_delta)
        self.monitor, self.mode, self.patience, self.min_delta = monitor, check_mode(mode), int(patience), min_delta
        self.best = math.inf if self.mode == 'min' else -math.inf
        self.wait = 0
        self.stopped_epoch: int | None = None

    def on_epoch_end(self, run: Any, epoch: int) -> None:
        value = monitored(run, self)
        if value is None:
            return
        better = value < self.best - self.min_delta if self.mode == 'min' else value > self.best + self.min_delta
        if better:
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= self.patience:
            if self.stopped_epoch is None:
                self.stopped_epoch = epoch
            run.stop()

    def state(self) -> dict:
        return {'best': self.best, 'wait': self.wait, 'stopped_epoch': self.stopped_epoch}

    def load_state(self, state: dict) -> None:
        self.best, self.wait, self.stopped_epoch = state['best'], state['wait'], state['stopped_epoch']

    def __repr__(self) -> str:
        return (f"EarlyStopping(monitor={self.monitor!r}, mode={self.mode!r}, patience={self.patience}, "
                f"min_delta={self.min_delta})")
