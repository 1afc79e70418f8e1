"""Per-action timing of a run (``run(..., profile=True)``, then ``pipeline.profile_info``).

The runner calls ``Profiler.record(action_name, seq, seconds)`` after each action of each batch, from any
worker thread. ``info`` aggregates per action; ``rows`` keeps one row per (batch, action). A detailed profiler
(``run(..., profile='detailed')``) also runs every action under ``cProfile`` and keeps, per batch and action, the
functions called (``calls``: ``id``, ``ncalls``, ``tottime``, ``cumtime``); ``flowpipe.execution.profile_tables``
turns both into ``pandas`` tables.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ['Profiler']


class Profiler:
    """Thread-safe collector of action timings; ``detailed=True`` also keeps function statistics per action."""

    def __init__(self, detailed: bool = False):
        self.detailed = detailed
        self._lock = threading.Lock()
        self._rows: list[tuple[str, int, float]] = []
        self._calls: list[dict[str, Any]] = []

    def record_calls(self, action_name: str, seq: int, stats: Any) -> None:
        """Add the ``pstats.Stats`` of one action on batch ``seq``: one entry per function called."""
        calls = [{'batch': seq, 'action': action_name, 'id': f'{function}::{file}:{line}', 'ncalls': values[1],
                  'tottime': values[2], 'cumtime': values[3]}
                 for (file, line, function), values in stats.stats.items()]
        with self._lock:
            self._calls.extend(calls)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Function statistics of a detailed profile, one entry per batch, action and function."""
        with self._lock:
            return list(self._calls)

    def record(self, action_name: str, seq: int, seconds: float) -> None:
        """Add one timing: action ``action_name`` took ``seconds`` on batch ``seq``."""
        with self._lock:
            self._rows.append((action_name, seq, seconds))

    @contextmanager
    def timer(self, action_name: str, seq: int) -> Iterator[None]:
        """Time the body of a ``with`` block as one run of ``action_name`` on batch ``seq``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.record(action_name, seq, time.perf_counter() - start)

    def clear(self) -> None:
        """Forget every timing."""
        with self._lock:
            self._rows.clear()
            self._calls.clear()

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One row per timing, ordered by batch then by recording order: ``batch``, ``action``, ``seconds``."""
        with self._lock:
            rows = list(self._rows)
        order = sorted(range(len(rows)), key=lambda i: (rows[i][1], i))
        return [{'batch': rows[i][1], 'action': rows[i][0], 'seconds': rows[i][2]} for i in order]

    @property
    def info(self) -> dict[str, dict[str, Any]]:
        """Per action, in order of first appearance: ``count``, ``total``, ``mean`` and ``max`` seconds."""
        with self._lock:
            rows = list(self._rows)
        stats: dict[str, dict[str, Any]] = {}
        for name, _, seconds in rows:
            entry = stats.setdefault(name, {'count': 0, 'total': 0.0, 'mean': 0.0, 'max': 0.0})
            entry['count'] += 1
            entry['total'] += seconds
            entry['max'] = max(entry['max'], seconds)
        for entry in stats.values():
            entry['mean'] = entry['total'] / entry['count']
        return stats

    def to_frame(self) -> Any:
        """The rows as a ``pandas.DataFrame`` (needs pandas: ``pip install flowpipe[pandas]``)."""
        try:
            import pandas as pd
        except ImportError as error:
            raise ImportError("Profiler.to_frame needs pandas. Install it with `pip install pandas`, "
                              "or read Profiler.info / Profiler.rows instead.") from error
        return pd.DataFrame(self.rows, columns=['batch', 'action', 'seconds'])

    def summary(self) -> str:
        """A printable table: one line per action with count, total, mean and max time, and its share."""
        stats = self.info
        if not stats:
            return 'No timings recorded (run the pipeline with profile=True).'
        grand = sum(entry['total'] for entry in stats.values()) or 1.0
        width = max(6, *(len(name) for name in stats))
        lines = [f"{'action':<{width}}  {'count':>6}  {'total, s':>9}  {'mean, ms':>9}  {'max, ms':>9}  {'share':>6}"]
        for name, entry in stats.items():
            lines.append(f"{name:<{width}}  {entry['count']:>6}  {entry['total']:>9.3f}  "
                         f"{entry['mean'] * 1e3:>9.3f}  {entry['max'] * 1e3:>9.3f}  {entry['total'] / grand:>6.1%}")
        return '\n'.join(lines)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} timings)\n{self.summary()}"
