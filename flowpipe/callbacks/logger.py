"""``Logger``: the one interface under the run's loggers (CSV, TensorBoard, MLflow, Weights & Biases)."""
from __future__ import annotations

import numbers
from typing import Any

from .base import Callback

__all__ = ['Logger']


class Logger(Callback):
    """The base of loggers: each epoch's logged values, on rank 0 only, once per epoch across a resume.

    A logger overrides three methods, which only rank 0 (or the one process) calls:

    - ``open(run, run_id)``: start writing; ``run_id`` is ``None`` for a new run, else the id ``open`` returned to
      the interrupted part of a resumed run (kept in the logger's state). Returns the tracker's id of the run
      (``None`` where there is none) and the last epoch the tracker already holds (``-1``: none it knows of).
    - ``write(epoch, logs)``: the values of the epoch that ends (``epoch``, ``step``, ``train/loss``, ``lr``,
      ``val/...``); ``numeric(logs)`` keeps those a tracker can plot.
    - ``close(error)``: after the last batch, a stop (``error`` is ``None``) or an error (the exception).

    The logger's state holds the run's id and the last epoch written, so a run resumed from a checkpoint goes on
    with the same tracker run and writes the epochs after the checkpoint's — and after the last one the tracker
    holds, where ``open`` can tell — with no epoch written twice. ``params(run)`` is the run's configuration as
    flat ``{name: text}`` (the run arguments, dataset, pipeline config and model configs of the checkpoints'
    canonical description), for trackers that record parameters.
    """
    order = 2

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.logged = -1                            # the last epoch written
        self._resumed, self._open = False, False

    def open(self, run: Any, run_id: str | None) -> tuple[str | None, int]:
        """Start writing (rank 0); the tracker's id of the run and the last epoch it already holds."""
        return run_id, -1

    def write(self, epoch: int, logs: dict[str, Any]) -> None:
        """Write the values of epoch ``epoch`` (rank 0)."""

    def close(self, error: BaseException | None) -> None:
        """Stop writing (rank 0); ``error``: the exception that ends the run, or ``None``."""

    def on_run_start(self, run: Any, logs: dict | None = None) -> None:
        if not self._resumed:                       # a new run (the object may be reused): its own tracker run
            self.run_id, self.logged = None, -1
        self._resumed = False
        if run.is_main:
            self.run_id, held = self.open(run, self.run_id)
            self._open = True
            self.logged = max(self.logged, held)

    def on_epoch_end(self, run: Any, epoch: int, logs: dict | None = None) -> None:
        if epoch <= self.logged:                    # the tracker holds it from the resumed run's interrupted part
            return
        self.logged = epoch
        if self._open:
            self.write(epoch, dict(run.logs if logs is None else logs))

    def on_run_end(self, run: Any, logs: dict | None = None) -> None:
        if self._open:
            self._open = False
            self.close(getattr(run, 'error', None))

    def state(self) -> dict:
        return {'run_id': self.run_id, 'logged': self.logged}

    def load_state(self, state: dict) -> None:
        self.run_id, self.logged, self._resumed = state['run_id'], state['logged'], True


def numeric(logs: dict[str, Any]) -> dict[str, float]:
    """The logged values a tracker plots: the numbers but ``epoch`` (the step they are written at)."""
    return {name: float(value) for name, value in logs.items()
            if name != 'epoch' and isinstance(value, numbers.Real) and not isinstance(value, bool)}


def params(run: Any) -> dict[str, str]:
    """The run's configuration as ``{name: text}``: ``run/<argument>``, ``dataset``, ``config/<key path>``,
    ``model/<name>/<key path>`` (``docs/checkpoints.md``'s canonical description); ``{}`` where the run does not
    say its arguments."""
    args = getattr(run, 'args', None)
    if args is None:
        return {}
    from ..execution.canonical import describe
    world = getattr(run, 'world', None)
    description = describe(run.pipeline, args, world.size if world is not None else 1)
    found = {f'run/{name}': value for name, value in description['run'].items()}
    found['dataset'] = description['dataset']
    found.update({f'config/{path}': value for path, value in description['config'].items()})
    for name, config in description['models'].items():
        found.update({f'model/{name}/{path}'.rstrip('/'): value for path, value in config.items()})
    return found
