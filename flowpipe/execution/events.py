"""The run's events: ``TrainingRun`` calls the callbacks, keeps the epoch's log and their state for checkpoints.

It is the one place the run loop tells callbacks what happened, each hook with its ``logs``: ``start`` before
the first batch, ``batch_end`` after each batch of the first stage (its stateful actions done), which also
announces the epochs that batch ends (``EpochClock``), and ``end``. ``train/loss`` is the mean of the losses of the
epoch's training steps taken: ``train_model`` adds each step's loss (``TorchModel.last_loss``, a tensor) to the
batch's logs (``Context.logs['steps']``), which the runner of the batch's stateful steps hands to ``collect``;
they are read as floats at the batch's end (a read per step, which a model's default ``nonfinite_loss`` check
already waits for). ``None`` stands for a step skipped for a non-finite loss (``nonfinite_loss='skip'``), counted
in ``train/skipped_steps`` instead (logged from the first epoch with such a step on).

A run **counted in steps** (a ``Validate(..., every=N, steps=True)`` among its callbacks) has its periods end every
``N`` batches (and at step 0 with ``at_start=True``) instead of at epoch ends: there every callback's
``on_epoch_end`` is called with the number of batches done in place of the epoch, and ``logs`` hold that ``step``,
the ``epoch`` it lies in, ``train/loss`` (the mean since the previous period's end), ``lr`` and what callbacks add.
``unit`` says which: ``'epoch'`` or ``'step'``.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from ..callbacks.base import RUN_HOOKS, Callback, listens, model_names, takes_logs
from ..errors import CheckpointError
from ..rank0 import is_main
from .epochs import EpochClock

__all__ = ['SKIPPED', 'TrainingRun', 'check_callbacks', 'summary_line']

#: the logged count of the epoch's training steps skipped for a non-finite loss
SKIPPED = 'train/skipped_steps'


def check_callbacks(callbacks: Any) -> tuple:
    """``callbacks=`` as a tuple of ``Callback`` objects."""
    if callbacks is None:
        return ()
    if isinstance(callbacks, Callback):
        callbacks = (callbacks,)
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(f"Expected callbacks as a list of flowpipe.callbacks objects. Received: "
                        f"callbacks={callbacks!r}")
    wrong = [callback for callback in callbacks if not isinstance(callback, Callback)]
    if wrong:
        raise TypeError(f"Expected callbacks derived from flowpipe.callbacks.Callback. Received: {wrong[0]!r}. "
                        "Subclass Callback and override its on_... hooks.")
    steps = [callback for callback in callbacks if not listens(callback, RUN_HOOKS)]
    if steps:
        raise TypeError(f"Expected callbacks that hear the run's events (on_run_start, on_batch_end, on_epoch_end, "
                        f"on_run_end). Received: {steps[0]!r}, which acts on a model's training steps only. Put it "
                        f"in the model config's 'callbacks' instead.")
    return tuple(callbacks)


class TrainingRun:
    """What callbacks see of a run, and the dispatcher of its events.

    Args:
        pipeline: the running pipeline.
        callbacks: the ``Callback`` objects, called by their ``order`` then in this order.
        clock: where the run's epochs end.
        world: the ``World`` of a distributed job, or ``None``.
        summary: print one line of the logs at each epoch end, on rank 0 (``write``: the bar's, set by the run).
        args: the run's ``RunArgs`` (what loggers record of its configuration), or ``None``.
    """

    def __init__(self, pipeline: Any, callbacks: Sequence[Any], clock: EpochClock, world: Any = None,
                 summary: bool = False, args: Any = None):
        self.pipeline, self.clock, self.world, self.args = pipeline, clock, world, args
        self.summary, self.write = summary, print
        self.callbacks = sorted(callbacks, key=lambda callback: callback.order)
        # each hook, and whether it takes logs; per batch only the callbacks that listen to batch ends
        self._hooks = {name: [_hook(callback, name) for callback in self.callbacks
                              if name != 'on_batch_end' or listens(callback, (name,))] for name in RUN_HOOKS}
        self.is_main = world.rank == 0 if world is not None else is_main()
        self.step, self.epoch = 0, 0
        self.logs: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.stopped = False
        #: the exception that ends the run, when one does (what ``on_run_end`` can tell a tracker)
        self.error: BaseException | None = None
        #: inside a batch's callbacks: a checkpoint taken now would hold some of them only
        self.busy = False
        self._loss_sum, self._loss_count, self._skipped = 0.0, 0, 0
        self._steps: list = []                      # the step losses of the batches not yet announced
        self._next_end = clock.end_step(0)
        self.every, self.at_start = _step_periods(self.callbacks)
        self.unit = 'epoch' if self.every is None else 'step'

    def stop(self) -> None:
        """End the run after the current batch: no later batch reaches a stateful action."""
        self.stopped = True

    def collect(self, logs: dict) -> None:
        """Take a batch's logs from the runner of its stateful steps (in the caller's thread, in batch order)."""
        self._steps.extend(logs.get('steps', ()))

    def start(self) -> None:
        for hook, takes in self._hooks['on_run_start']:
            _call(hook, takes, self.logs, self)
        if self.at_start and self.step == 0 and not self.history:       # a resumed run had its step 0
            self._period_end(0, 0)

    def batch_end(self, batch: Any) -> bool:
        """Announce a completed batch (and the epochs it ends); whether the run is to stop now."""
        self.busy = True
        seq, self.step = self.step, self.step + 1
        losses, taken = self._steps, []
        if losses:
            taken = [float(loss) for loss in losses if loss is not None]
            self._loss_sum, self._loss_count = self._loss_sum + sum(taken), self._loss_count + len(taken)
            self._skipped += len(losses) - len(taken)
            losses.clear()
        if self._hooks['on_batch_end']:
            logs = {'step': self.step, **({'train/loss': sum(taken) / len(taken)} if taken else {})}
            for hook, takes in self._hooks['on_batch_end']:
                _call(hook, takes, logs, self, batch)
        if self.every is not None:
            if self.step % self.every == 0:
                self._period_end(self.step, self.clock.epoch_of(seq))
        elif self.step >= self._next_end:
            for epoch in self.clock.ended(seq):
                self._epoch_end(epoch)
            self._next_end = self.clock.end_step(self.epoch)
        if self.world is not None:
            self.stopped = bool(_distributed().broadcast(self.stopped))    # rank 0's decision holds on every rank
        self.busy = False
        return self.stopped

    def _epoch_end(self, epoch: int) -> None:
        self._period_end(epoch, epoch)
        self.epoch = epoch + 1

    def _period_end(self, period: int, epoch: int) -> None:
        """The end of a period: epoch ``epoch``'s end (``period`` is ``epoch``), or in a run counted in steps the
        step ``period`` (``epoch``: the epoch it lies in)."""
        mean = self._loss_sum / self._loss_count if self._loss_count else math.nan
        self.logs = {'epoch': epoch, 'step': self.step, 'train/loss': mean, **_learning_rates(self.pipeline)}
        # logged from the first epoch that skipped a step on: a run without skips keeps its columns
        if self._skipped or (self.history and SKIPPED in self.history[-1]):
            self.logs[SKIPPED] = self._skipped
        self._loss_sum, self._loss_count, self._skipped = 0.0, 0, 0
        agreed = self.world is None
        for callback, (hook, takes) in zip(self.callbacks, self._hooks['on_epoch_end']):
            if not agreed and callback.order > 0:
                # every rank decides from rank 0's values: the same stop, learning rates and best epochs everywhere
                self.logs, agreed = _distributed().broadcast(self.logs), True
            _call(hook, takes, self.logs, self, period)
        self.history.append(dict(self.logs))
        if self.summary and self.is_main:
            total = self.clock.n_epochs if self.every is None else getattr(self.args, 'n_iters', None)
            self.write(summary_line(self.logs, total, self.unit))

    def end(self) -> None:
        for hook, takes in self._hooks['on_run_end']:
            _call(hook, takes, self.logs, self)

    def state(self) -> dict:
        return {'step': self.step, 'epoch': self.epoch, 'history': [dict(logs) for logs in self.history],
                'logs': dict(self.logs), 'stopped': self.stopped,
                'loss': (self._loss_sum, self._loss_count, self._skipped),
                'callbacks': [(_kind(callback), _described(callback), callback.state())
                              for callback in self.callbacks]}

    def load_state(self, state: dict) -> None:
        self.step, self.epoch, self.stopped = state['step'], state['epoch'], state['stopped']
        self.history, self.logs = [dict(logs) for logs in state['history']], dict(state['logs'])
        self._loss_sum, self._loss_count, self._skipped = state['loss']
        self._next_end = self.clock.end_step(self.epoch)
        for callback, saved in zip(self.callbacks, matched_states(self.callbacks, state['callbacks'])):
            callback.load_state(saved)


def _hook(callback: Any, name: str) -> tuple[Any, bool]:
    hook = getattr(callback, name)
    return hook, takes_logs(hook)


def _call(hook: Any, takes: bool, logs: dict, *args: Any) -> None:
    """``hook(*args, logs=logs)``, or without ``logs`` for a hook written before hooks received them."""
    if takes:
        hook(*args, logs=logs)
    else:
        hook(*args)


def _kind(callback: Any) -> str:
    return f'{type(callback).__module__}.{type(callback).__qualname__}'


def _described(callback: Any) -> str:
    from .canonical_values import stable_repr
    return stable_repr(callback)


def matched_states(callbacks: Sequence[Any], saved: list) -> list:
    """The saved state of each callback, matched by kind and description (``repr``), whatever the order of the
    ``callbacks=`` list: two callbacks of one kind keep their own states. A callback without a saved state of its
    kind, or a saved one left over, is a ``CheckpointError`` naming them."""
    if saved and not isinstance(saved[0], tuple):         # a checkpoint of an earlier flowpipe: by position
        saved = [(_kind(callback), _described(callback), state) for callback, state in zip(callbacks, saved)]
    left, states = list(saved), []
    for callback in callbacks:
        kind, described = _kind(callback), _described(callback)
        same = [entry for entry in left if entry[:2] == (kind, described)]
        alike = [entry for entry in left if entry[0] == kind]
        found = same[0] if same else alike[0] if len(alike) == 1 else None
        if found is None:
            break
        left.remove(found)
        states.append(found[2])
    if len(states) != len(callbacks) or left:
        raise CheckpointError(
            f"Expected the callbacks the checkpoint was written with, in any order. Received: "
            f"{[_described(callback) for callback in callbacks]}; the checkpoint has "
            f"{[described for _, described, _ in saved]}. Resume with the same callbacks= (the same kinds and "
            "arguments), or start afresh without resume=.")
    return states


def summary_line(logs: dict[str, Any], n_epochs: int | None, unit: str = 'epoch') -> str:
    """``epoch 3/10 – loss 0.4821 – lr 0.05 – val/accuracy 0.9375``: the epoch counted from 1, as Keras shows it,
    then every other logged number (``train/loss`` as ``loss``) with 4 significant digits; in a run counted in
    steps ``step 300/5000 – ...`` (``n_epochs``: the run's number of batches)."""
    count = logs['epoch'] + 1 if unit == 'epoch' else logs['step']
    parts = [f"{unit} {count}/{n_epochs}" if n_epochs is not None else f"{unit} {count}"]
    for name, value in logs.items():
        if name not in ('epoch', 'step') and isinstance(value, numbers.Real):
            parts.append(f"{'loss' if name == 'train/loss' else name} {value:.4g}")
    return ' – '.join(parts)


def _step_periods(callbacks: Sequence[Any]) -> tuple[int | None, bool]:
    """``(N, at_start)`` of a run counted in steps (the callbacks' ``step_periods``: ``Validate(every=N,
    steps=True)``), ``(None, False)`` for a run counted in epochs; several must agree on ``N``."""
    periods = [callback.step_periods for callback in callbacks if getattr(callback, 'step_periods', None)]
    if not periods:
        return None, False
    sizes = {every for every, _ in periods}
    if len(sizes) > 1:
        raise ValueError(f"Expected the callbacks of a run counted in steps to agree on its period. Received: "
                         f"every={sorted(sizes)} with steps=True; give every Validate(steps=True) the same every=")
    return sizes.pop(), any(at_start for _, at_start in periods)


def _distributed() -> Any:
    from ..parallel import distributed
    return distributed


def _learning_rates(pipeline: Any) -> dict[str, float]:
    """``lr`` of the one model with an optimizer (``lr/<name>`` of each when there are several)."""
    with pipeline.state.models.lock:
        items = list(pipeline.state.models.items())
    if not items:       # before the first batch (a run counted in steps at step 0): the models declared built
        items = [(name, pipeline.m(name)) for name in model_names(pipeline) or []]
    rates = {name: float(optimizer.param_groups[0]['lr']) for name, model in items
             if (optimizer := getattr(model, 'optimizer', None)) is not None}
    if len(rates) == 1:
        return {'lr': next(iter(rates.values()))}
    return {f'lr/{name}': rate for name, rate in rates.items()}
