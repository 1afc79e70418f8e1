"""``CSVLogger``: the logged values of every epoch as rows of ``metrics.csv``."""
from __future__ import annotations

import csv
import io
import os
from typing import Any

from ..atomic import write_text_atomically
from .base import Callback

__all__ = ['CSVLogger']


class CSVLogger(Callback):
    """Write ``folder/metrics.csv``: one row per epoch (``epoch``, ``step``, ``train/loss``, ``lr``, ``val/...``).

    The columns are the first epoch's values in their logged order, then any value logged later; the whole file
    is rewritten atomically at each epoch end (rank 0 only), so an interrupted run leaves a complete file.
    """
    order = 2

    def __init__(self, folder: str | os.PathLike, filename: str = 'metrics.csv'):
        if not isinstance(folder, (str, os.PathLike)):
            raise TypeError(f"Expected folder as a str or os.PathLike. Received: folder={folder!r}")
        self.path = os.path.join(os.fspath(folder), filename)
        self.rows: list[dict[str, Any]] = []

    def on_epoch_end(self, run: Any, epoch: int) -> None:
        self.rows.append(dict(run.logs))
        if run.is_main:
            write_text_atomically(_as_csv(self.rows), self.path)

    def state(self) -> dict:
        return {'rows': [dict(row) for row in self.rows]}

    def load_state(self, state: dict) -> None:
        self.rows = [dict(row) for row in state['rows']]

    def __repr__(self) -> str:
        return f"CSVLogger({os.path.dirname(self.path)!r})"


def _as_csv(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(key for row in rows for key in row))
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, restval='', lineterminator='\n')
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()

