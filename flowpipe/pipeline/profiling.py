"""What ``Pipeline`` shows of its last run made with ``profile=True``: the ``Profiler``, the time per action
(``profile_info``, a ``pandas.DataFrame`` when pandas is installed), the rows per batch and action, and a printable
table. The profiler itself is ``flowpipe.execution.profile``; ``PipelineProfile`` is one of ``Pipeline``'s bases.
"""
from __future__ import annotations

from typing import Any

__all__ = ['PipelineProfile']


class PipelineProfile:
    """The results of a pipeline's last profiled run, read from its state (``self._state.profiler``)."""
    __slots__ = ()

    @property
    def profiler(self) -> Any:
        """The ``Profiler`` of the last run made with ``profile=True`` (``None`` before one)."""
        return self._state.profiler

    @property
    def profile_info(self) -> Any:
        """Per action of the last profiled run: ``count``, ``total``, ``mean``, ``max`` seconds, as a
        ``pandas.DataFrame`` when pandas is installed, else a dict (``None`` before a profiled run)."""
        profiler = self._state.profiler
        if profiler is None:
            return None
        try:
            from ..execution.profile_tables import info_frame
            return info_frame(profiler)
        except ImportError:
            return profiler.info

    @property
    def profile_rows(self) -> Any:
        """One row per batch and action of the last profiled run: ``batch``, ``action``, ``seconds`` (or ``None``)."""
        profiler = self._state.profiler
        return None if profiler is None else profiler.rows

    def profile_summary(self) -> str:
        """A printable table of time per action for the last profiled run."""
        profiler = self._state.profiler
        if profiler is None:
            raise ValueError("Expected a run with profile=True first. Received: no profiled run yet. "
                             "Call pipeline.run(..., profile=True).")
        return profiler.summary()
