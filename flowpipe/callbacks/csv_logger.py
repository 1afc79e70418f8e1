"""``CSVLogger``: the logged values of every epoch as rows of ``metrics.csv``, each marked with its run."""
from __future__ import annotations

import csv
import io
import os
import time
import uuid
from typing import Any

from ..atomic import write_text_atomically
from ..folder_lock import lock_on_main
from .logger import Logger

__all__ = ['CSVLogger']


class CSVLogger(Logger):
    """Write ``folder/metrics.csv``: one row per epoch (``run``, ``epoch``, ``step``, ``train/loss``, ``lr``,
    ``val/...``).

    A run appends to the rows already in the file (earlier runs', kept as they are): the first column, ``run``,
    names the run that logged the row (its start time in UTC and a random suffix, kept in its checkpoints, so a
    resumed run goes on with its own rows, in place of those its interrupted part wrote). The columns are ``run``,
    then the file's, then the values in their logged order as they first appear. The whole file is rewritten
    atomically at each epoch end (rank 0 only), so an interrupted run leaves a complete file. The file is locked
    for the run's life: a second run into it at the same time raises ``FolderInUseError``.
    """

    def __init__(self, folder: str | os.PathLike, filename: str = 'metrics.csv'):
        if not isinstance(folder, (str, os.PathLike)):
            raise TypeError(f"Expected folder as a str or os.PathLike. Received: folder={folder!r}")
        super().__init__()
        self.folder, self.filename = os.fspath(folder), filename
        self.path = os.path.join(self.folder, filename)
        self.rows: list[dict[str, Any]] = []
        self._earlier: list[dict[str, str]] = []    # the file's rows of other runs
        self._columns: list[str] = []               # the file's columns
        self._lock: Any = None

    @property
    def run(self) -> str | None:
        """This run's mark in the file's ``run`` column."""
        return self.run_id

    def on_run_start(self, run: Any, logs: dict | None = None) -> None:
        if not self._resumed:                       # a new run: its own rows (the object may be reused)
            self.rows = []
        self._lock = lock_on_main(self.folder, self.filename, f'CSVLogger rows into {self.filename}',
                                  getattr(run, 'world', None), run.is_main)
        super().on_run_start(run, logs)

    def open(self, run: Any, run_id: str | None) -> tuple[str | None, int]:
        self._columns, rows = _read(self.path)
        run_id = run_id or _new_run()
        self._earlier = [row for row in rows if row.get('run') != run_id]
        return run_id, -1                           # the rows after the checkpoint are written again, in place

    def write(self, epoch: int, logs: dict[str, Any]) -> None:
        self.rows.append(logs)
        own = [{'run': self.run_id, **row} for row in self.rows]
        write_text_atomically(_as_csv(self._columns, self._earlier + own), self.path)

    def on_run_end(self, run: Any, logs: dict | None = None) -> None:
        super().on_run_end(run, logs)
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def state(self) -> dict:
        return {**super().state(), 'rows': [dict(row) for row in self.rows]}

    def load_state(self, state: dict) -> None:
        self.rows = [dict(row) for row in state['rows']]
        # a checkpoint of an earlier version: its mark under 'run', the last epoch that of its last row
        super().load_state({'run_id': state.get('run'), 'logged': self.rows[-1]['epoch'] if self.rows else -1,
                            **state})

    def __repr__(self) -> str:
        return f"CSVLogger({self.folder!r})"


def _new_run() -> str:
    return time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()) + '-' + uuid.uuid4().hex[:6]


def _read(path: str) -> tuple[list[str], list[dict[str, str]]]:
    """The columns and rows of the CSV file ``path`` (none when it does not exist)."""
    try:
        with open(path, newline='', encoding='utf-8') as file:
            reader = csv.DictReader(file)
            rows = list(reader)
            if any(None in row for row in rows):
                raise csv.Error('a row has more cells than the header')
            return list(reader.fieldnames or ()), rows
    except FileNotFoundError:
        return [], []
    except (csv.Error, UnicodeDecodeError) as error:
        raise ValueError(f"Expected {path!r} to be a CSV file that CSVLogger appends its rows to. Received: a file "
                         f"it cannot read ({type(error).__name__}: {error}). Move that file away, or pass another "
                         "folder or filename=.") from error


def _as_csv(columns: list[str], rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(['run', *columns, *(key for row in rows for key in row)]))
    text = io.StringIO()
    writer = csv.DictWriter(text, columns, restval='', lineterminator='\n')
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()
