"""``Callback``: what a run tells the objects listening to it, and the state they keep in checkpoints."""
from __future__ import annotations

from typing import Any

__all__ = ['Callback']


class Callback:
    """The base of run callbacks: ``run(..., callbacks=[...])`` calls each hook in the caller's thread.

    Hooks run in batch order, after the batch's stateful actions (model steps, variable writes) are done, and before
    any later batch's stateful actions start, prefetch or not. ``run`` is the run's ``TrainingRun``: its
    ``pipeline``, ``step`` (batches completed), ``epoch``, ``logs`` (the values of the epoch that ends:
    ``epoch``, ``step``, ``train/loss``, ``lr``, ``val/...``), ``history`` (the logs of earlier epochs),
    ``is_main`` (rank 0, or not a distributed job) and ``stop()`` (end the run after the current batch).

    At an epoch end the callbacks run by ``order`` (then in the list's order): ``0`` computes values
    (``Validate``), ``1`` decides (``EarlyStopping``, ``ModelCheckpoint``, ``ReduceLROnPlateau``), ``2`` records
    (loggers), so a logger sees every value whatever its place in the list.
    """

    #: 0 computes logged values, 1 decides from them, 2 records them
    order: int = 1

    def on_run_start(self, run: Any) -> None:
        """Before the first batch (after a resumed run's state is loaded)."""

    def on_batch_end(self, run: Any, batch: Any) -> None:
        """After the stateful actions of ``batch`` (``run.step`` counts it)."""

    def on_epoch_end(self, run: Any, epoch: int) -> None:
        """After the batch that holds epoch ``epoch``'s last item (0-based)."""

    def on_run_end(self, run: Any) -> None:
        """After the last batch, a stop, or an interruption."""

    def state(self) -> dict:
        """What decides the callback's next decisions, for run checkpoints (picklable)."""
        return {}

    def load_state(self, state: dict) -> None:
        """Continue from ``state()`` of a checkpoint."""


def monitored(run: Any, monitor: str, owner: str) -> float:
    """The value ``monitor`` of the epoch that ends; ``KeyError`` naming what is logged when it is missing."""
    if monitor not in run.logs:
        raise KeyError(f"Expected {owner} to find monitor={monitor!r} among the epoch's logged values. Received: "
                       f"{sorted(run.logs)}. Put a Validate(...) that logs it in callbacks=, or monitor one of these.")
    return float(run.logs[monitor])


def check_mode(mode: Any) -> str:
    """``mode`` as ``'min'`` or ``'max'``."""
    if mode not in ('min', 'max'):
        raise ValueError(f"Expected mode='min' or mode='max'. Received: mode={mode!r}")
    return mode
