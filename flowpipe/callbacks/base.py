"""``Callback``: what a run tells the objects listening to it, and the state they keep in checkpoints."""
from __future__ import annotations

import inspect
import math
import numbers
from typing import Any

from ..rank0 import warn0

__all__ = ['Callback']


class Callback:
    """The base of callbacks: the run's (``run(..., callbacks=[...])``) and the model's (a model config's
    ``callbacks``, see ``BaseCallback``) hear their events through these hooks.

    Every hook receives ``logs``, the values of its event, as Keras's callbacks do; ``logs`` is the one carrier of
    the loss, the learning rate and the metrics between the run loop, ``Validate``, the deciding callbacks and
    the loggers, and every callback of an event gets the same dict: a value one callback sets there is seen by
    the callbacks after it (see ``order``).

    - ``on_run_start(run, logs)``: before the first batch (after a resumed run's state is loaded); ``logs`` holds
      the last epoch's values of a resumed run, else nothing.
    - ``on_batch_end(run, batch, logs)``: after the stateful actions of ``batch``; ``logs`` holds ``step`` (the
      batches done, ``batch`` included) and ``train/loss``, the mean loss of the batch's training steps (when one
      was taken).
    - ``on_epoch_end(run, epoch, logs)``: after the batch that holds epoch ``epoch``'s last item (0-based);
      ``logs`` holds ``epoch``, ``step``, ``train/loss`` (the mean loss of the epoch's steps), ``lr``, then what
      callbacks add (``val/...``). It is ``run.logs``.
    - ``on_run_end(run, logs)``: after the last batch, a stop, or an interruption; ``logs`` holds the last epoch's
      values.
    - ``on_train_step_end(model, logs)``: after each training step of a model whose config lists the callback;
      ``logs`` holds ``loss`` (the step's full-batch loss), ``lr``, ``iteration``, ``batch_size``,
      ``inputs_shapes``, ``targets_shapes``.

    A run's hooks run in the caller's thread, in batch order, after the batch's stateful actions (model steps,
    variable writes) are done, and before any later batch's stateful actions start, prefetch or not. ``run`` is
    the run's ``TrainingRun``: its ``pipeline``, ``step`` (batches completed), ``epoch``, ``logs`` (the epoch's),
    ``history`` (the logs of earlier epochs), ``is_main`` (rank 0, or not a distributed job), ``error`` (in
    ``on_run_end``: the exception that ends the run, or ``None``) and ``stop()`` (end the run after the current
    batch). A hook written without ``logs`` (``on_epoch_end(self, run, epoch)``) is called without it and reads
    ``run.logs``.

    At an epoch end the callbacks run by ``order`` (then in the list's order): ``0`` computes values
    (``Validate``), ``1`` decides (``EarlyStopping``, ``ModelCheckpoint``, ``ReduceLROnPlateau``), ``2`` records
    (loggers), so a logger sees every value whatever its place in the list.
    """

    #: 0 computes logged values, 1 decides from them, 2 records them
    order: int = 1

    def on_run_start(self, run: Any, logs: dict | None = None) -> None:
        """Before the first batch (after a resumed run's state is loaded)."""

    def on_batch_end(self, run: Any, batch: Any, logs: dict | None = None) -> None:
        """After the stateful actions of ``batch`` (``run.step`` counts it)."""

    def on_epoch_end(self, run: Any, epoch: int, logs: dict | None = None) -> None:
        """After the batch that holds epoch ``epoch``'s last item (0-based)."""

    def on_run_end(self, run: Any, logs: dict | None = None) -> None:
        """After the last batch, a stop, or an interruption."""

    def on_train_step_end(self, model: Any, logs: dict) -> None:
        """After a training step of a model whose config lists this callback."""

    def logged_names(self) -> frozenset[str]:
        """The names this callback adds to an epoch's logs; an epoch may end before the first of its values."""
        return frozenset()

    def state(self) -> dict:
        """What decides the callback's next decisions, for run checkpoints (picklable)."""
        return {}

    def load_state(self, state: dict) -> None:
        """Continue from ``state()`` of a checkpoint."""


#: the hooks a run calls
RUN_HOOKS = ('on_run_start', 'on_batch_end', 'on_epoch_end', 'on_run_end')


def listens(callback: Any, hooks: tuple[str, ...]) -> bool:
    """Whether ``callback`` overrides one of ``hooks``."""
    return any(getattr(type(callback), hook, None) is not getattr(Callback, hook, None) for hook in hooks)


def takes_logs(hook: Any) -> bool:
    """Whether a bound hook accepts ``logs`` (one written before hooks received it does not)."""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(parameter.name == 'logs' or parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)


def monitored(run: Any, callback: Any, logs: dict | None = None) -> float | None:
    """The value ``callback.monitor`` in ``logs`` (``run.logs`` when not given) of the epoch that ends, or
    ``None``: the callback skips this epoch.

    ``None`` (no decision, with a warning the first time) when another callback of the run logs that name but has
    not yet at this epoch end (``Validate(every=N)`` with N beyond the epoch's batches), and when the value is
    nan: a nan is neither an improvement nor a bad epoch. ``KeyError`` naming what is logged when no callback
    logs it (a typo, a missing ``Validate``).
    """
    monitor, owner = callback.monitor, type(callback).__name__
    logs = run.logs if logs is None else logs
    if monitor in logs:
        value = float(logs[monitor])
        if not math.isnan(value):
            return value
        _warn_once(callback, '_warned_nan', f"{owner} skips epoch {logs.get('epoch')}: monitor={monitor!r} is "
                   f"nan. Expected a number to compare with the best. Received: {monitor}=nan. A nan is neither "
                   "an improvement nor a bad epoch: epochs with a nan value are skipped (no decision). Find why "
                   "the metric is nan (a nan loss, an empty validation set, a division by zero in the metric).")
        return None
    later = [other for other in getattr(run, 'callbacks', ()) if monitor in other.logged_names()]
    if not later:
        raise KeyError(f"Expected {owner} to find monitor={monitor!r} among the epoch's logged values. Received: "
                       f"{sorted(logs)}. Put a Validate(...) that logs it in callbacks=, or monitor one of these.")
    _warn_once(callback, '_warned_missing', f"{owner} skips epoch {logs.get('epoch')}: monitor={monitor!r} is "
               f"logged by {later[0]!r}, which has no value yet at this epoch end. Received: {sorted(logs)}. "
               "Epochs without the value are skipped (no decision); validate every epoch, or every fewer batches "
               "than an epoch holds, for a decision at each epoch end.")
    return None


def _warn_once(callback: Any, flag: str, message: str) -> None:
    """Warn once per callback and kind: a long run must not repeat it at every epoch, nor every rank of a job."""
    if not getattr(callback, flag, False):
        setattr(callback, flag, True)
        warn0(message, UserWarning, stacklevel=3)


def check_number(owner: str, name: str, value: Any, low: float = 0.0) -> float:
    """``value`` as a finite float ``>= low``; ``ValueError`` naming the argument otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < low:
        raise ValueError(f"Expected {owner}'s {name} as a finite number >= {low:g}. Received: {name}={value!r}. "
                         f"Pass a finite number >= {low:g} (with nan or inf no value compares as the rule says).")
    return float(value)


def model_names(pipeline: Any) -> list[str] | None:
    """The names of the models ``pipeline`` holds or declares (``init_model``, ``import_model``, ``load_model``);
    ``None`` when a declared name is a named expression, known only as batches flow."""
    declared = _declared_names(pipeline.all_records())
    return None if declared is None else sorted(declared | set(pipeline.state.models))


def _declared_names(records: Any) -> set[str] | None:
    """The model names ``init_model``, ``import_model`` and ``load_model`` among ``records`` register; ``None`` when
    one of them is a named expression (known only as batches flow)."""
    names: set[str] = set()
    for record in flat_records(records):
        if record.name in ('init_model', 'import_model', 'load_model'):
            name = record.kwargs.get('name', record.args[0] if record.args else None)
            if not isinstance(name, str):
                return None
            names.add(name)
    return names


def flat_records(records: Any) -> list:
    """A pipeline's action records, those inside ``p @ prob`` included."""
    return [inner for record in records
            for inner in (flat_records(record.actions) if hasattr(record, 'actions') else (record,))]


def check_mode(mode: Any) -> str:
    """``mode`` as ``'min'`` or ``'max'``."""
    if mode not in ('min', 'max'):
        raise ValueError(f"Expected mode='min' or mode='max'. Received: mode={mode!r}")
    return mode
