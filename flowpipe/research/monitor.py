"""What a research's run reports: ``ResearchMonitor`` (finished and failed experiments) and ``ResearchProfiler``
(time per unit and iteration, with ``profile=True``; cProfile rows too with ``profile=2``)."""
from __future__ import annotations

from typing import Any

__all__ = ['ResearchMonitor', 'ResearchProfiler']


class ResearchMonitor:
    """Counts the experiments that came back; ``exceptions`` lists the failed ones (id, config, traceback)."""

    def __init__(self) -> None:
        self.finished = 0
        self.exceptions: list[dict] = []
        self.processes: dict[int, str] = {}

    def add(self, record: dict) -> None:
        """Take one experiment's record."""
        self.finished += 1
        if record.get('exception'):
            self.exceptions.append({'id': record['id'], 'config': record['config'],
                                    'traceback': record['exception']})

    def __repr__(self) -> str:
        return f'ResearchMonitor(finished={self.finished}, failed={len(self.exceptions)})'


class ResearchProfiler:
    """The profile rows of every experiment: ``profile_info`` (a pandas table), ``rows`` (plain dicts)."""

    def __init__(self, rows: list[dict]):
        self.rows = list(rows)

    def add(self, rows: list[dict]) -> None:
        """Add an experiment's rows."""
        self.rows.extend(rows)

    @property
    def profile_info(self) -> Any:
        """One row per unit call (per function too with ``profile=2``)."""
        from .results import _pandas
        return _pandas().DataFrame(self.rows)

    def show_profile_info(self, per_experiment: bool = False) -> Any:
        """Time per unit (and experiment): sum, mean and max over iterations."""
        info = self.profile_info
        keys = ['experiment', 'unit'] if per_experiment else ['unit']
        columns = [name for name in ('total_time', 'unit_time') if name in info]
        table = info.drop_duplicates(['experiment', 'unit', 'iter'])
        return table.groupby(keys)[columns].agg(['sum', 'mean', 'max']).sort_values((columns[0], 'sum'),
                                                                                     ascending=False)
