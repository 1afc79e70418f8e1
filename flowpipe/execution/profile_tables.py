"""``pandas`` tables of a run's profile (``pipeline.profile_info``, ``pipeline.show_profile_info``).

Four views, as batchflow shows them: time per action summed over batches (``sum``/``mean``/``max`` per batch),
time per batch and action, and, for a detailed profile, the functions each action called (over all batches or
per batch), the slowest ``limit`` per action first.
"""
from __future__ import annotations

from typing import Any

__all__ = ['info_frame', 'profile_table']


def _pandas() -> Any:
    try:
        import pandas as pd
    except ImportError as error:
        raise ImportError("Profile tables need pandas: pip install pandas (flowpipe[pandas]). Without it, read "
                          "pipeline.profiler.info, .rows and .calls, or print pipeline.profile_summary().") from error
    return pd


def info_frame(profiler: Any) -> Any:
    """``profiler.info`` as a DataFrame indexed by action: ``count``, ``total``, ``mean``, ``max`` seconds."""
    pd = _pandas()
    frame = pd.DataFrame.from_dict(profiler.info, orient='index', columns=['count', 'total', 'mean', 'max'])
    frame.index.name = 'action'
    return frame


def profile_table(profiler: Any, per_iter: bool = False, detailed: bool = False, sortby: Any = None,
                  limit: int | None = 10) -> Any:
    """One of the four views (see the module docstring) as a DataFrame, slowest first.

    Args:
        profiler: the run's ``Profiler``.
        per_iter: one row per batch (``iter``) instead of sums over batches.
        detailed: the functions each action called (needs ``run(..., profile='detailed')``).
        sortby: the column to sort by (over batches, a pair such as ``('tottime', 'sum')``).
        limit: the number of functions shown per action (and batch); ``None`` for all.
    """
    pd = _pandas()
    if not detailed:
        frame = pd.DataFrame(profiler.rows).rename(columns={'batch': 'iter', 'seconds': 'total_time'})
        if per_iter:
            return frame.set_index(['iter', 'action']).sort_values(
                ['iter', sortby or 'total_time'], ascending=[True, False])
        table = frame.groupby('action')[['total_time']].agg(['sum', 'mean', 'max'])
        return table.sort_values(sortby or ('total_time', 'sum'), ascending=False)
    if not profiler.detailed:
        raise ValueError("Expected a run with profile='detailed' for detailed=True. Received: a run with "
                         "profile=True; run again with profile='detailed'")
    frame = pd.DataFrame(profiler.calls).rename(columns={'batch': 'iter'})
    columns = ['ncalls', 'tottime', 'cumtime']
    if per_iter:
        frame = frame.sort_values(['iter', 'action', sortby or 'tottime'], ascending=[True, True, False])
        keys = ['iter', 'action']
    else:
        frame = frame.groupby(['action', 'id'])[columns].agg(['sum', 'mean', 'max']).reset_index()
        frame = frame.sort_values(['action', sortby or ('tottime', 'sum')], ascending=[True, False])
        keys = ['action']
    if limit is not None:
        frame = frame.groupby(keys, sort=False).head(limit)
    return frame.set_index([*keys, 'id'])
