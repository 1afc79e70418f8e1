"""``EarlyStopping``: stop training when a watched value has stopped improving: a run's epochs or a model's steps."""
from __future__ import annotations

import math
import numbers
from collections import deque
from typing import Any

from ..errors import StopPipeline
from .base import check_number, monitored, _warn_once
from .plateau import BATCHFLOW_MODES, Plateau
from .step_callback import BaseCallback, check_stream

__all__ = ['EarlyStopping']

_MODES = ('min', 'max', *BATCHFLOW_MODES)
#: the defaults of each rule: Keras's (modes 'min', 'max') and batchflow's (its window modes)
_DEFAULTS = {'keras': {'patience': 0, 'min_delta': 0.0}, 'batchflow': {'patience': 10, 'min_delta': 0.001}}


class EarlyStopping(BaseCallback):
    """Stop at the end of the epoch, or after the training step, at which ``monitor`` is on a plateau.

    One class for both places a callback goes:

    - in ``run(..., callbacks=[...])`` it reads ``monitor`` (``'val/loss'`` when not given) in each epoch's logs
      and stops the run at that epoch's end; ``stopped_epoch`` is the first such epoch (0-based; in a run counted
      in steps, ``Validate(steps=True)``, the step);
    - in a model config's ``callbacks`` it reads each training step's logs (``monitor``: ``'loss'`` when not
      given), and raises ``StopPipeline`` (a pipeline run ends after the current batch) after writing
      ``EarlyStopping at iteration N: ...`` to ``stream``; ``stopped_iteration`` is the last such step.

    The rule (``rule``, a ``Plateau``) is set by ``mode``:

    - ``'min'``, ``'max'``: Keras's: a value improves when beyond the best by more than ``min_delta``; the callback
      stops after ``patience`` values without improvement (``0``: at the first). Defaults ``patience=0``,
      ``min_delta=0``; the run's rule when ``mode`` is not given.
    - ``'complex'``, ``'pytorch'``, ``'keras'``, ``'mean'``: batchflow's windows of ``patience`` values (see
      ``Plateau.batchflow``; ``'complex'`` needs ``patience >= 2``). Defaults ``patience=10``,
      ``min_delta=0.001``; the model's rule (``'complex'``) when ``mode`` is not given.

    A stop starts no cooldown: every later value is checked again (``cooldown`` is accepted for batchflow's
    signature). A nan value is skipped with one warning. The first positional argument is ``monitor``: batchflow's
    ``EarlyStopping('complex', 10)`` is refused with the fix (``mode='complex'`` by name).
    """

    def __init__(self, monitor: str | None = None, mode: str | None = None, patience: int | None = None,
                 min_delta: float | None = None, cooldown: int | None = None, stream: Any = None):
        min_delta = _checked(monitor, mode, patience, min_delta, cooldown)
        self.given = {'monitor': monitor, 'mode': mode, 'patience': patience, 'min_delta': min_delta,
                      'cooldown': cooldown}
        self.level: str | None = None               # 'run' or 'model', once the callback is used
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, min_delta
        self.cooldown = cooldown
        super().__init__(stream=check_stream(stream))

    def _settle(self, level: str) -> None:
        """Fill the arguments not given with the defaults of the rule ``level`` ('run' or 'model') takes."""
        if self.level is not None:
            return
        given = self.given
        mode = given['mode'] or ('complex' if level == 'model' and given['monitor'] is None else 'min')
        defaults = _DEFAULTS['batchflow' if mode in BATCHFLOW_MODES else 'keras']
        patience = defaults['patience'] if given['patience'] is None else int(given['patience'])
        if mode in BATCHFLOW_MODES:
            _check_window(mode, patience)
        self.level, self.mode, self.patience = level, mode, patience
        self.monitor = given['monitor'] or ('loss' if level == 'model' else 'val/loss')
        self.min_delta = defaults['min_delta'] if given['min_delta'] is None else given['min_delta']
        self.cooldown = patience if given['cooldown'] is None and mode in BATCHFLOW_MODES else given['cooldown']
        self.rule = self._new_rule()

    def _new_rule(self) -> Plateau:
        if self.mode in BATCHFLOW_MODES:
            return Plateau.batchflow(self.mode, self.patience, self.min_delta, self.cooldown)
        return Plateau.keras(self.mode, self.patience, self.min_delta)

    @property
    def best(self) -> float:
        """The best value so far (the window's statistic in batchflow's modes)."""
        rule = getattr(self, 'rule', None)
        return math.inf if rule is None else rule.best

    @property
    def wait(self) -> int:
        """Values without improvement since the best."""
        rule = getattr(self, 'rule', None)
        return 0 if rule is None else rule.bad

    def reset(self) -> None:
        super().reset()
        if self.level is not None:
            self.rule = self._new_rule()            # a bound copy must not share its original's rule
        self.stopped_epoch: int | None = None
        self.stopped_iteration: int | None = None

    def bind(self, model: Any) -> 'EarlyStopping':
        bound = super().bind(model)
        bound.level = None
        bound._settle('model')
        if bound.monitor.startswith(('val/', 'train/')) or bound.monitor in ('epoch', 'step'):
            raise ValueError(f"Expected a model's EarlyStopping to watch a value of the training step's logs "
                             f"('loss'). Received: monitor={bound.monitor!r}, a value of the run's epoch logs. Put "
                             f"this EarlyStopping in run(..., callbacks=[...]) instead of the model config.")
        return bound

    # ----- in a run

    def on_run_start(self, run: Any, logs: dict | None = None) -> None:
        self._settle('run')

    def on_epoch_end(self, run: Any, epoch: int, logs: dict | None = None) -> None:
        self._settle('run')
        value = monitored(run, self, logs)
        if value is None or not self.rule.update(value):
            return
        if self.stopped_epoch is None:
            self.stopped_epoch = epoch
            self.write(f"EarlyStopping at {getattr(run, 'unit', 'epoch')} {epoch}: {self.monitor} is on a plateau "
                       f"({self._rule_text()})")
        run.stop()

    # ----- in a model

    def on_train_step_end(self, model: Any, logs: dict) -> None:
        if self.monitor not in logs:
            raise KeyError(f"Expected EarlyStopping to find monitor={self.monitor!r} among the training step's "
                           f"logs. Received: {sorted(logs)}. Watch 'loss'.")
        self._step(float(logs[self.monitor]))

    def on_iter_end(self, loss: float, **info: Any) -> None:
        self._step(float(loss))

    def _step(self, value: float) -> None:
        self._settle('model')
        iteration = self.model.iteration
        if math.isnan(value):
            nan_step(self, value)
            return
        if self.rule.update(value):
            self.stopped_iteration = iteration
            message = (f'EarlyStopping at iteration {iteration}: the training loss is on a plateau '
                       f'({self._rule_text()})')
            self.write(message)
            raise StopPipeline(message)

    def _rule_text(self) -> str:
        return f'mode={self.mode!r}, patience={self.patience}, min_delta={self.min_delta}'

    # ----- state

    def state(self) -> dict:
        # a callback not yet placed in a run or a model has the fresh state of either rule
        rule = (self.rule if self.level is not None else Plateau('max' if self.given['mode'] == 'max' else 'min'))
        state = rule.state()
        return {**super().state(), 'best': state['best'], 'wait': state['bad'], 'held': state['held'],
                'seen': state['seen'], 'values': state['values'], 'stopped_epoch': self.stopped_epoch,
                'stopped_iteration': self.stopped_iteration}

    def load_state(self, state: dict) -> None:
        """Continue from ``state()``, or from the state of an earlier flowpipe's run-level (``wait``) or model-level
        (``cooldown_counter``, ``losses``) ``EarlyStopping``."""
        self._settle('run')
        self._written = bool(state.get('written', False))
        rule = self.rule
        rule.reset()
        rule.best, rule.bad = state['best'], state.get('wait', 0)
        rule.values = deque(state.get('values', state.get('losses', ())), maxlen=rule.window)
        if 'seen' in state:
            rule.held, rule.seen = state['held'], state['seen']
        else:
            rule.load_unchecked(state.get('cooldown_counter', 0))
        self.stopped_epoch = state.get('stopped_epoch')
        self.stopped_iteration = state.get('stopped_iteration')

    def arguments(self) -> dict:
        """The arguments, as the earlier run-level (``monitor=`` given) and model-level (a batchflow ``mode``)
        classes wrote them, so that a checkpoint of theirs finds its callbacks; else those given. The same
        before and after the callback is placed."""
        given = self.given
        if given['monitor'] is not None and given['mode'] not in BATCHFLOW_MODES:
            keras = _DEFAULTS['keras']
            return {'monitor': given['monitor'], 'mode': given['mode'] or 'min',
                    **{name: keras[name] if given[name] is None else given[name] for name in keras},
                    **({'stream': self.stream} if self.stream is not None else {})}
        if given['monitor'] is None and given['mode'] in BATCHFLOW_MODES:
            batchflow = _DEFAULTS['batchflow']
            patience = batchflow['patience'] if given['patience'] is None else given['patience']
            return {'mode': given['mode'], 'patience': patience,
                    'min_delta': batchflow['min_delta'] if given['min_delta'] is None else given['min_delta'],
                    'cooldown': patience if given['cooldown'] is None else given['cooldown'], 'stream': self.stream}
        named = {name: value for name, value in given.items() if value is not None}
        return {**named, **({'stream': self.stream} if self.stream is not None else {})}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if 'given' not in state:            # a model file of an earlier flowpipe: batchflow's arguments
            self.given = {'monitor': None, 'mode': state['mode'], 'patience': state['patience'],
                          'min_delta': state['min_delta'], 'cooldown': state.get('cooldown')}
            self.level = None
            self.reset()


def _check_window(mode: str, patience: int) -> None:
    low = 2 if mode == 'complex' else 1
    if patience < low:
        raise ValueError(f"Expected patience >= {low} for mode={mode!r} (the window of values the rule compares). "
                         f"Received: patience={patience}.")


def _checked(monitor: Any, mode: Any, patience: Any, min_delta: Any, cooldown: Any) -> float | None:
    """Refuse arguments no rule takes; ``min_delta`` as a float (``None`` when not given)."""
    if monitor in BATCHFLOW_MODES:
        raise TypeError(f"Expected EarlyStopping's first argument as monitor=, the logged value to watch. "
                        f"Received: monitor={monitor!r}, one of batchflow's plateau modes. Pass it by name: "
                        f"EarlyStopping(mode={monitor!r}, patience=...).")
    if monitor is not None and not isinstance(monitor, str):
        raise TypeError(f"Expected monitor as the name of a logged value (a str). Received: monitor={monitor!r}")
    if mode is not None and mode not in _MODES:
        raise ValueError(f"Expected mode= one of {_MODES}. Received: mode={mode!r}")
    if mode == 'max' and monitor is None:
        raise ValueError(f"Expected mode in {('min', *BATCHFLOW_MODES)} for a loss (with no monitor=, "
                         f"EarlyStopping watches 'val/loss' in a run, the step's 'loss' in a model). Received: "
                         f"mode='max'. Pass the value that grows too: monitor='val/accuracy', mode='max'.")
    for name, value in (('patience', patience), ('cooldown', cooldown)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Integral)):
            raise TypeError(f"Expected {name} as an int. Received: {name}={value!r}")
        if value is not None and value < 0:
            raise ValueError(f"Expected {name} as an int >= 0. Received: {name}={value!r}")
    if mode in BATCHFLOW_MODES:
        _check_window(mode, _DEFAULTS['batchflow']['patience'] if patience is None else patience)
    return None if min_delta is None else check_number('EarlyStopping', 'min_delta', min_delta)


def nan_step(callback: Any, value: float) -> None:
    """Say once that a model's callback skips a step whose watched value is nan."""
    name = getattr(callback, 'monitor', None) or 'loss'
    _warn_once(callback, '_warned_nan', f"{type(callback).__name__} skips step {callback.model.iteration}: {name} is "
               f"nan. Expected a number to compare with the best. Received: {name}={value}. A nan is neither an "
               "improvement nor a step without one: such steps are skipped (no decision). Find why the loss is "
               "nan, or stop on it with the model's 'nonfinite_loss': 'raise'.")
