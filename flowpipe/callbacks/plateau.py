"""``Plateau``: the one rule by which every ``EarlyStopping`` and ``ReduceLROnPlateau`` decides that a value has
stopped improving, whether it watches an epoch's logged value (the run's callbacks) or each step's loss (a model's).

The three rules flowpipe follows are settings of it: ``Plateau.keras`` (the run's ``EarlyStopping``),
``Plateau.torch`` (the run's ``ReduceLROnPlateau``) and ``Plateau.batchflow`` (the windows of batchflow's model
callbacks, ``mode='complex'``, ``'pytorch'``, ``'keras'``, ``'mean'``).
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any

__all__ = ['BATCHFLOW_MODES', 'Plateau']

#: batchflow's plateau modes: the window's statistic, compared with the best (or, ``'complex'``, its older half)
BATCHFLOW_MODES = ('complex', 'pytorch', 'keras', 'mean')
_STATISTICS = {'complex': 'halves', 'pytorch': 'min', 'keras': 'min', 'mean': 'mean'}


class Plateau:
    """Whether a sequence of values, fed one at a time (``update``), has stopped improving.

    Each value joins a window of the last ``window`` values; the compared value is the window's ``statistic``:
    ``'last'`` (the value itself), ``'min'``, ``'mean'``, or ``'halves'`` (the mean of the newest
    ``ceil(window / 2)`` values, compared with the mean of the older ones instead of the best). Then:

    - the first ``warmup`` values, and the ``rest`` values after each action, are recorded but not checked;
    - the compared value improves when below ``best * (1 - threshold) - min_delta`` (``direction='min'``; above
      ``best * (1 + threshold) + min_delta`` for ``'max'``): it becomes the best and the count of bad values
      restarts; otherwise the count grows;
    - during the ``cooldown`` values after an action the count stays 0;
    - ``update`` says *act* when the count reaches ``patience`` (>= 1); ``acted()`` then restarts the count and
      begins the cooldown and the rest. A caller that does not call ``acted`` (``EarlyStopping``) keeps counting.

    A nan is neither an improvement nor a bad value: ``update(nan)`` records nothing and returns ``None``.
    """

    def __init__(self, direction: str = 'min', patience: int = 1, min_delta: float = 0.0, threshold: float = 0.0,
                 cooldown: int = 0, window: int = 1, statistic: str = 'last', warmup: int = 0,
                 rest: float = 0):
        if direction not in ('min', 'max'):
            raise ValueError(f"Expected mode='min' or mode='max'. Received: mode={direction!r}")
        if statistic not in ('last', 'min', 'mean', 'halves'):
            raise ValueError(f"Expected statistic in ('last', 'min', 'mean', 'halves'). Received: {statistic!r}")
        self.direction, self.patience = direction, max(int(patience), 1)
        self.min_delta, self.threshold = min_delta, threshold
        self.cooldown, self.window, self.statistic, self.warmup, self.rest = cooldown, window, statistic, warmup, rest
        self.reset()

    @classmethod
    def keras(cls, mode: str, patience: int, min_delta: float) -> 'Plateau':
        """Keras's ``EarlyStopping``: ``patience`` epochs without an improvement by more than ``min_delta``."""
        return cls(mode, patience=patience, min_delta=min_delta)

    @classmethod
    def torch(cls, mode: str, patience: int, threshold: float, cooldown: int) -> 'Plateau':
        """torch's ``ReduceLROnPlateau`` (relative ``threshold``): more than ``patience`` bad values."""
        return cls(mode, patience=patience + 1, threshold=threshold, cooldown=cooldown)

    @classmethod
    def batchflow(cls, mode: str, patience: int, min_delta: float, cooldown: int | None) -> 'Plateau':
        """batchflow's model callbacks: a window of ``patience`` losses, unchecked until it is full; a plateau at
        the first check without improvement, then ``cooldown - 1`` unchecked values (never again for ``None``)."""
        # `or`: batchflow reads a cooldown of 0 as none given
        return cls('min', patience=1, min_delta=min_delta, window=patience, statistic=_STATISTICS[mode],
                   warmup=patience, rest=(cooldown or math.inf) - 1)

    def reset(self) -> None:
        """Forget every value: the state of a rule that has seen none."""
        self.best = math.inf if self.direction == 'min' else -math.inf
        self.bad, self.cooldown_left, self.seen = 0, 0, 0
        self.held: float = 0                    # values still to record without a check after an action
        self.values: deque = deque(maxlen=self.window)

    def update(self, value: float) -> bool | None:
        """Record ``value``; whether to act now (``None``: a nan, skipped)."""
        if math.isnan(value):
            return None
        self.values.append(value)
        self.seen += 1
        if self.seen <= self.warmup:
            return False
        if self.held != 0:
            self.held -= 1
            return False
        current, reference = self._compared()
        if self._improves(current, reference):
            self.best, self.bad = current, 0
        else:
            self.bad += 1
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            self.bad = 0
        return self.bad >= self.patience

    def acted(self) -> None:
        """The caller acted on a plateau: the count restarts, the cooldown and the rest begin."""
        self.bad, self.cooldown_left, self.held = 0, self.cooldown, self.rest

    def _compared(self) -> tuple[float, float]:
        values = list(self.values)
        if self.statistic == 'halves':
            split = -self.window // 2               # batchflow's slice: (-window) // 2
            return _mean(values[split:]), _mean(values[-self.window:split])
        if self.statistic == 'last':
            return values[-1], self.best
        return (min(values) if self.statistic == 'min' else _mean(values)), self.best

    def _improves(self, value: float, reference: float) -> bool:
        if self.direction == 'min':
            return value < reference * (1 - self.threshold) - self.min_delta
        return value > reference * (1 + self.threshold) + self.min_delta

    @property
    def unchecked(self) -> float:
        """How many of the next values will be recorded without a check (the warm-up's, then the rest's)."""
        return max(self.warmup - self.seen, 0) + self.held

    def state(self) -> dict:
        """What decides the next answers (plain values)."""
        return {'best': self.best, 'bad': self.bad, 'cooldown_left': self.cooldown_left, 'held': self.held,
                'seen': self.seen, 'values': list(self.values)}

    def load_state(self, state: dict) -> None:
        """Continue from ``state()``."""
        self.best, self.bad, self.cooldown_left = state['best'], state['bad'], state['cooldown_left']
        self.held, self.seen = state['held'], state['seen']
        self.values = deque(state['values'], maxlen=self.window)

    def __getstate__(self) -> dict:
        return {**self.__dict__, 'values': list(self.values)}      # a list: what torch's safe reader rebuilds

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.values = deque(self.values, maxlen=self.window)

    def load_unchecked(self, unchecked: float) -> None:
        """Continue with ``unchecked`` values to record without a check (a count saved as one number)."""
        self.seen, self.held = max(self.seen, self.warmup), unchecked

    def __repr__(self) -> str:
        return (f"Plateau({self.direction!r}, patience={self.patience}, min_delta={self.min_delta}, "
                f"threshold={self.threshold}, cooldown={self.cooldown}, window={self.window}, "
                f"statistic={self.statistic!r}, warmup={self.warmup}, rest={self.rest})")


def _mean(values: list) -> float:
    return sum(values) / len(values)
