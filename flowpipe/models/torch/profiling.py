"""Time per torch operation of a model's training steps (model config ``'profile': True``).

Each training step runs under ``torch.profiler``; ``OpProfiler`` keeps one row per step and operation: ``iter``
(the model's step number), ``name``, ``calls``, ``self_cpu_s`` (time in the operation itself) and ``cpu_s``
(including what it calls). ``table`` aggregates them into a ``pandas.DataFrame``, slowest first.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

__all__ = ['OpProfiler', 'profiled']


class OpProfiler:
    """Rows of per-operation timings, one per training step and operation."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, iteration: int, events: Any) -> None:
        """Record the ``key_averages()`` of one step."""
        rows = [{'iter': iteration, 'name': event.key, 'calls': event.count,
                 'self_cpu_s': event.self_cpu_time_total / 1e6, 'cpu_s': event.cpu_time_total / 1e6}
                for event in events]
        with self._lock:
            self.rows.extend(rows)

    def table(self, per_iter: bool = False, limit: int | None = 10) -> Any:
        """Operations by self time: summed over steps (``sum``/``mean``/``max`` per step), or per step."""
        try:
            import pandas as pd
        except ImportError as error:
            raise ImportError("Model profiling tables need pandas: pip install pandas (flowpipe[pandas]). "
                              "The raw rows are in model.profiler.rows.") from error
        frame = pd.DataFrame(self.rows, columns=['iter', 'name', 'calls', 'self_cpu_s', 'cpu_s'])
        if per_iter:
            frame = frame.sort_values(['iter', 'self_cpu_s'], ascending=[True, False])
            return frame.groupby('iter').head(limit).set_index(['iter', 'name']) if limit else frame
        summary = frame.groupby('name')[['calls', 'self_cpu_s', 'cpu_s']].agg(['sum', 'mean', 'max'])
        summary = summary.sort_values(('self_cpu_s', 'sum'), ascending=False)
        return summary.head(limit) if limit else summary


@contextlib.contextmanager
def profiled(profiler: OpProfiler | None, iteration: int) -> Iterator[None]:
    """Run the body under ``torch.profiler`` and add its operations to ``profiler`` (nothing when ``None``)."""
    if profiler is None:
        yield
        return
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        yield
    profiler.add(iteration, prof.key_averages())
