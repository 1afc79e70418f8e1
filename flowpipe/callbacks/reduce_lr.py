"""``ReduceLROnPlateau``: lower a model's learning rate when a monitored value stops improving (torch's rule)."""
from __future__ import annotations

import numbers
from typing import Any

from .base import Callback, check_mode, check_number, model_names, monitored
from .plateau import Plateau

__all__ = ['ReduceLROnPlateau']


class ReduceLROnPlateau(Callback):
    """Multiply the learning rates of model ``model_name``'s optimizer by ``factor`` on a plateau of ``monitor``.

    torch's ``ReduceLROnPlateau`` rule, once per epoch end: a value better than the best (relative ``threshold``:
    below ``best * (1 - threshold)`` for ``'min'``, above ``best * (1 + threshold)`` for ``'max'``) becomes the
    best and resets the count of bad epochs; otherwise the count grows. During ``cooldown`` epochs after a
    reduction bad epochs are not counted. When the count exceeds ``patience`` each group's rate becomes
    ``max(lr * factor, min_lr)`` (unless that changes it by less than ``eps``), and the count restarts.
    The rates are set in the optimizer's ``param_groups``. The rule is ``rule``, a ``Plateau.torch``.
    """

    def __init__(self, model_name: str, monitor: str = 'val/loss', mode: str = 'min', factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, cooldown: int = 0, min_lr: float = 0.0,
                 eps: float = 1e-8):
        if not isinstance(factor, numbers.Real) or not 0 < factor < 1:
            raise ValueError(f"Expected factor in (0, 1). Received: factor={factor!r}")
        for name, value in (('patience', patience), ('cooldown', cooldown)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"Expected {name} as an int >= 0. Received: {name}={value!r}")
        threshold, min_lr, eps = (check_number('ReduceLROnPlateau', name, value)
                                  for name, value in (('threshold', threshold), ('min_lr', min_lr), ('eps', eps)))
        if not isinstance(model_name, str):
            raise TypeError(f"Expected ReduceLROnPlateau's model_name as the name of a model of the run's pipeline "
                            f"(a str). Received: model_name={model_name!r}. Pass e.g. 'net'.")
        self.model_name, self.monitor, self.mode = model_name, monitor, check_mode(mode)
        self.factor, self.patience, self.threshold = float(factor), int(patience), threshold
        self.cooldown, self.min_lr, self.eps = int(cooldown), min_lr, eps
        self.rule = Plateau.torch(self.mode, self.patience, threshold, self.cooldown)

    @property
    def best(self) -> float:
        """The best monitored value so far."""
        return self.rule.best

    @property
    def bad_epochs(self) -> int:
        """Epochs without improvement since the best, the last reduction or the cooldown."""
        return self.rule.bad

    @property
    def cooldown_left(self) -> int:
        """Epochs of the cooldown still to come."""
        return self.rule.cooldown_left

    def on_run_start(self, run: Any, logs: dict | None = None) -> None:
        names = model_names(run.pipeline)
        if names is not None and self.model_name not in names:
            raise ValueError(f"Expected ReduceLROnPlateau's model_name to name a model of the run's pipeline. "
                             f"Received: model_name={self.model_name!r}; the pipeline's models: {names}. Pass one of "
                             "them (the model whose optimizer is to lower its learning rate).")

    def on_epoch_end(self, run: Any, epoch: int, logs: dict | None = None) -> None:
        value = monitored(run, self, logs)
        if value is not None and self.rule.update(value):
            self._reduce(run)
            self.rule.acted()

    def _reduce(self, run: Any) -> None:
        optimizer = getattr(run.pipeline.m(self.model_name), 'optimizer', None)
        if optimizer is None:
            raise ValueError(f"Expected model {self.model_name!r} to have an optimizer. Received: none (the model "
                             "is not built or does not train). Name the trained model in ReduceLROnPlateau.")
        for group in optimizer.param_groups:
            old = float(group['lr'])
            new = max(old * self.factor, self.min_lr)
            if old - new > self.eps:
                group['lr'] = new

    def state(self) -> dict:
        return {'best': self.best, 'bad_epochs': self.bad_epochs, 'cooldown_left': self.cooldown_left}

    def load_state(self, state: dict) -> None:
        rule = self.rule
        rule.best, rule.bad, rule.cooldown_left = state['best'], state['bad_epochs'], state['cooldown_left']

    def __repr__(self) -> str:
        return (f"ReduceLROnPlateau({self.model_name!r}, monitor={self.monitor!r}, mode={self.mode!r}, "
                f"factor={self.factor}, patience={self.patience}, cooldown={self.cooldown}, min_lr={self.min_lr})")
