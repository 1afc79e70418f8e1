"""Resolve and run the ``decay`` key of a model config: learning-rate schedules stepped by training batches.

``decay`` is one schedule or a list of them (batchflow's form: warm-up, then decay). A schedule is a
``torch.optim.lr_scheduler`` class name or short name (``'exp'``, ``'step'``, ``'cos'``, ``'linear'``...), a scheduler
class, a callable ``optimizer -> scheduler``, or a dict ``{'name': ..., **scheduler kwargs}`` with three optional
keys read here:

- ``start_iter`` (default 0) and ``last_iter`` (default: no end): the schedule steps only after training batches
  whose 1-based number ``i`` lies in ``[start_iter, last_iter]``;
- ``frequency`` (default 1): it steps after batch ``i`` when ``(i - start_iter) % frequency == 0``; ``'epoch'``:
  once after each batch that ends an epoch of the run (the batch holding an epoch's last item).

Every scheduler is made on the same optimizer, in list order, and they step in list order: torch's schedulers
multiply the learning rate they find, so a warm-up ``LinearLR`` and a later ``ExponentialLR`` chain.
``ReduceLROnPlateau`` steps on the training loss of the batch it steps after, unless ``Decay.step_on`` feeds it.
``'warmup_cosine'`` (``WarmupCosine``) is the schedule of language-model runs, nanoGPT's ``get_lr``.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import torch
from torch.optim import lr_scheduler

from .optimizers import construct, find_class, split_spec

__all__ = ['Decay', 'Schedule', 'WarmupCosine', 'check_steps', 'make_decay']

_DECAY_ALIASES = {'exp': 'ExponentialLR', 'step': 'StepLR', 'multistep': 'MultiStepLR', 'cos': 'CosineAnnealingLR',
                  'cosine': 'CosineAnnealingLR', 'lambda': 'LambdaLR', 'onecycle': 'OneCycleLR',
                  'linear': 'LinearLR', 'poly': 'PolynomialLR', 'plateau': 'ReduceLROnPlateau',
                  'cosw': 'CosineAnnealingWarmRestarts', 'cyclic': 'CyclicLR', 'warmup_cosine': 'WarmupCosine'}
_STEP_KEYS = ('start_iter', 'last_iter', 'frequency')


class WarmupCosine(lr_scheduler.LRScheduler):
    """A linear warm-up then a cosine decay to ``min_lr``: the learning rate of step ``it`` (0-based) is nanoGPT's
    ``get_lr(it)``: ``lr * (it + 1) / (warmup + 1)`` for ``it < warmup``, ``min_lr`` for ``it > total``, else
    ``min_lr + (lr - min_lr) * (1 + cos(pi * (it - warmup) / (total - warmup))) / 2``. ``lr`` is each group's
    own; a group whose rate differs from the optimizer's ``lr`` gets ``min_lr`` scaled by their ratio.

    Args:
        optimizer: the optimizer.
        warmup: steps of warm-up (``warmup_iters``).
        total: the step at which the decay reaches ``min_lr`` (``lr_decay_iters``), above ``warmup``.
        min_lr: the floor.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, warmup: int, total: int, min_lr: float = 0.0,
                 last_epoch: int = -1):
        for key, value in (('warmup', warmup), ('total', total)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"Expected warmup_cosine {key!r} as a non-negative int (steps). Received: "
                                 f"{key}={value!r}")
        if total <= warmup:
            raise ValueError(f"Expected warmup_cosine 'total' above 'warmup' (the decay lasts total - warmup "
                             f"steps). Received: warmup={warmup!r}, total={total!r}")
        if not isinstance(min_lr, numbers.Real) or min_lr < 0:
            raise ValueError(f"Expected warmup_cosine 'min_lr' as a number >= 0. Received: min_lr={min_lr!r}")
        self.warmup, self.total, self.min_lr = int(warmup), int(total), float(min_lr)
        self.reference = optimizer.defaults.get('lr')
        super().__init__(optimizer, last_epoch)

    def rate(self, it: int, lr: float) -> float:
        """The learning rate of step ``it`` for a group whose own rate is ``lr``."""
        floor = self.min_lr if lr == self.reference or not self.reference else self.min_lr * lr / self.reference
        if it < self.warmup:
            return lr * (it + 1) / (self.warmup + 1)
        if it > self.total:
            return floor
        ratio = (it - self.warmup) / (self.total - self.warmup)
        return floor + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - floor)

    def get_lr(self) -> list[float]:
        return [self.rate(self.last_epoch, lr) for lr in self.base_lrs]


class Schedule:
    """One scheduler and the training batches it steps after (see the module docstring).

    Attributes:
        scheduler: the torch scheduler.
        start_iter, last_iter: the closed range of 1-based batch numbers it steps after (``last_iter`` may be inf).
        frequency: batches between steps, or ``'epoch'``.
        plateau: whether the scheduler steps on a value (``ReduceLROnPlateau``).
    """

    def __init__(self, scheduler: Any, start_iter: int = 0, last_iter: float = math.inf, frequency: Any = 1):
        self.start_iter, self.last_iter, self.frequency = check_steps(start_iter, last_iter, frequency)
        self.scheduler = scheduler
        self.plateau = isinstance(scheduler, lr_scheduler.ReduceLROnPlateau)

    def due(self, iteration: int, epochs_ended: int) -> int:
        """How many times to step after batch ``iteration`` that ended ``epochs_ended`` epochs."""
        if not self.start_iter <= iteration <= self.last_iter:
            return 0
        if self.frequency == 'epoch':
            return epochs_ended
        return int((iteration - self.start_iter) % self.frequency == 0)

    def __repr__(self) -> str:
        every = 'every epoch' if self.frequency == 'epoch' else \
            f"every {self.frequency} batch{'es' * (self.frequency > 1)}"
        span = '' if (self.start_iter, self.last_iter) == (0, math.inf) else \
            f", batches {self.start_iter}..{'' if self.last_iter == math.inf else self.last_iter}"
        return f'{type(self.scheduler).__name__}({every}{span})'


def check_steps(start_iter: Any = 0, last_iter: Any = math.inf, frequency: Any = 1) -> tuple[int, float, Any]:
    """The checked ``start_iter``, ``last_iter`` (``None`` or inf: no end) and ``frequency`` of a schedule."""
    start = _check_count('start_iter', start_iter)
    last = math.inf if last_iter is None or last_iter == math.inf else _check_count('last_iter', last_iter)
    if last < start:
        raise ValueError(f"Expected decay 'last_iter' >= 'start_iter'. Received: start_iter={start_iter!r}, "
                         f"last_iter={last_iter!r}. Swap them, or leave last_iter out for no end.")
    if frequency == 'epoch':
        return start, last, frequency
    if isinstance(frequency, bool) or not isinstance(frequency, numbers.Integral) or frequency < 1:
        raise ValueError(f"Expected decay 'frequency' as a positive int (batches between steps) or 'epoch'. "
                         f"Received: frequency={frequency!r}.")
    return start, last, int(frequency)


def _check_count(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"Expected decay {key!r} as a non-negative int (a 1-based training batch number). "
                         f"Received: {key}={value!r}.")
    return int(value)


class Decay:
    """The schedules of a model, stepped after every training batch (``TorchModel.train`` calls ``after_batch``).

    Attributes:
        schedules: the ``Schedule`` objects, in config order.
        epoch_items: items one epoch of the run feeds the model, for ``frequency='epoch'``; a run sets it at every
            training step (``None``: unknown, e.g. a model trained outside a run).
        items_seen: items trained on so far (the global batch in a distributed job): where the epochs end.
        fed: ``True`` once ``step_on`` fed the plateau schedules: they no longer step on the training loss.
    """

    def __init__(self, schedules: list[Schedule]):
        self.schedules = list(schedules)
        self._per_epoch = any(schedule.frequency == 'epoch' for schedule in self.schedules)
        self.epoch_items: int | None = None
        self.items_seen = 0
        self.fed = False

    @property
    def scheduler(self) -> Any:
        """The first schedule's scheduler (the only one for a single ``decay``)."""
        return self.schedules[0].scheduler

    def before_batch(self) -> None:
        """Check, before a training step, that the schedules can step after it (a per-epoch one needs
        ``epoch_items``): an error then leaves the model untrained by the batch."""
        if self._per_epoch:
            self._epochs_ended(self.items_seen, 0)

    def after_batch(self, iteration: int, items: int = 0, loss: Callable[[], float] | None = None) -> None:
        """Step the schedules due after batch ``iteration`` (1-based) of ``items`` items, whose loss ``loss()``
        gives (read only when a plateau schedule steps on it)."""
        before, self.items_seen = self.items_seen, self.items_seen + items
        ended = self._epochs_ended(before, self.items_seen) if self._per_epoch else 0
        for schedule in self.schedules:
            for _ in range(schedule.due(iteration, ended)):
                if not schedule.plateau:
                    schedule.scheduler.step()
                elif not self.fed:
                    value = float(loss()) if loss is not None else math.nan
                    if math.isfinite(value):       # a skipped non-finite step says nothing about a plateau
                        schedule.scheduler.step(value)

    def _epochs_ended(self, before: int, after: int) -> int:
        size = self.epoch_items
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"Expected the number of items per epoch for decay frequency='epoch'. Received: "
                             f"epoch_items={size!r} (the model is trained outside a run over a dataset, or after "
                             "a rebatch). Train it with pipeline.run(...), set model.decay.epoch_items, or give "
                             "'frequency' as a number of batches.")
        return after // size - before // size

    def step_on(self, value: float) -> None:
        """Step the plateau schedules (``ReduceLROnPlateau``) on a monitored ``value`` (a validation loss, say);
        from then on they step only when fed here, no longer on the training loss."""
        plateaus = [schedule for schedule in self.schedules if schedule.plateau]
        if not plateaus:
            raise ValueError(f"Expected a ReduceLROnPlateau schedule in the model's decay to feed. Received: decay="
                             f"{self!r}. Add {{'name': 'ReduceLROnPlateau', ...}} to the model's 'decay'.")
        self.fed = True
        for schedule in plateaus:
            schedule.scheduler.step(float(value))

    def state(self) -> dict:
        """The schedulers' states and the counters, for save/load."""
        return {'schedulers': [schedule.scheduler.state_dict() for schedule in self.schedules],
                'items_seen': self.items_seen, 'fed': self.fed}

    def load_state(self, state: dict) -> None:
        """Restore ``state``; a single scheduler's ``state_dict`` (older model files) is the first schedule's."""
        if 'schedulers' not in state:
            state = {'schedulers': [state]}
        if len(state['schedulers']) != len(self.schedules):
            raise ValueError(f"Expected the saved state of {len(self.schedules)} decay schedules. Received: "
                             f"{len(state['schedulers'])}. Load it into a model with the same 'decay' list.")
        for schedule, saved in zip(self.schedules, state['schedulers']):
            schedule.scheduler.load_state_dict(saved)
        self.items_seen = state.get('items_seen', 0)
        self.fed = state.get('fed', False)

    def __repr__(self) -> str:
        text = ', '.join(map(repr, self.schedules))
        return text if len(self.schedules) == 1 else f'[{text}]'


def make_decay(spec: Any, optimizer: torch.optim.Optimizer) -> Decay | None:
    """A ``Decay`` for a config's ``decay`` value (one schedule or a list), or ``None`` when there is none."""
    if spec is None:
        return None
    specs = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    if not specs:
        return None
    return Decay([_make_schedule(item, optimizer) for item in specs])


def _make_schedule(spec: Any, optimizer: torch.optim.Optimizer) -> Schedule:
    spec, kwargs = split_spec(spec, 'decay')
    steps = {key: kwargs.pop(key) for key in _STEP_KEYS if key in kwargs}
    check_steps(**steps)        # before the scheduler is made: making one sets the optimizer's learning rate
    name = spec
    if isinstance(spec, str):
        spec = find_class(spec, {**vars(lr_scheduler), 'WarmupCosine': WarmupCosine}, lr_scheduler.LRScheduler,
                          'decay', _DECAY_ALIASES)
    if not callable(spec):
        raise TypeError(f"Expected a decay name, scheduler class or callable(optimizer). Received: decay={spec!r}.")
    return Schedule(construct(spec, optimizer, kwargs, 'decay', name), **steps)
