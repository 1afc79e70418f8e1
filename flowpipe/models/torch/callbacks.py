"""batchflow's model callbacks: rules on the training loss, applied by the model after every training step.

A model config lists them under ``callbacks`` (``'callbacks': [EarlyStopping(patience=5), LogCallback(stream=print)]``).
``TorchModel`` works on its own copies (``model.callbacks``, see ``BaseCallback.bind``) and calls each one's
``on_train_step_end(model, logs)`` after the optimizer step and the decay, with the step's logs (``loss``: the
full-batch loss, the same value on every replica and, all-reduced, on every rank of a distributed job, so every
rank decides alike at the same step). They are callbacks of the run's protocol (``flowpipe.callbacks.Callback``).

- ``PlateauCallback`` applies batchflow's settings of the one plateau rule (``flowpipe.callbacks.plateau``:
  ``mode``, ``patience``, ``min_delta``, ``cooldown``); ``ReduceLROnPlateau`` multiplies the learning rates by
  ``factor`` on a plateau. ``EarlyStopping`` is ``flowpipe.callbacks.EarlyStopping``, the run's own, which in a
  model config takes batchflow's rule and raises ``StopPipeline`` (a pipeline run ends after the current batch).
- ``LogCallback`` writes the loss (and memory, shapes, micro-batches) every ``frequency`` steps.

Every callback writes to its ``stream`` (``None``: nowhere, a callable such as ``print``, or a file path, started
afresh by the callback's first line) from rank 0 only, and keeps its state in ``state()``/``load_state()``, which
model files and run checkpoints carry. See ``docs/models.md``, "Model callbacks".
"""
from __future__ import annotations

import math
import os
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from ...callbacks.early_stopping import EarlyStopping, nan_step
from ...callbacks.plateau import BATCHFLOW_MODES, Plateau
from ...callbacks.step_callback import BaseCallback
from ...parallel import distributed  # noqa: F401 - BaseCallback.write asks it which rank writes

__all__ = ['BaseCallback', 'EarlyStopping', 'LogCallback', 'PLATEAU_MODES', 'PlateauCallback', 'ReduceLROnPlateau',
           'make_callbacks']
assert __all__ == sorted(__all__)

PLATEAU_MODES = BATCHFLOW_MODES


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Expected {name} as an int. Received: {name}={value!r}.")
    if value < low:
        raise ValueError(f"Expected {name} >= {low}. Received: {name}={value!r}.")
    return value


def _check_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"Expected {name} as a number. Received: {name}={value!r}.")
    return float(value)


class PlateauCallback(BaseCallback):
    """Acts (``action``) when the training loss stops improving, by batchflow's rule (``rule``, a
    ``Plateau.batchflow``).

    The first ``patience`` steps are never checked. Then, at each step, over the last ``patience`` losses (the
    current step's included):

    - ``'complex'``: the mean of the newest ``ceil(patience / 2)`` losses against the mean of the ones before them
      (batchflow's slices ``[-patience:-patience//2]`` and ``[-patience//2:]``);
    - ``'pytorch'``, ``'keras'``: their minimum against the best value so far;
    - ``'mean'``: their mean against the best value so far.

    The loss improves when that value is below the compared one by more than ``min_delta``; it becomes the best.
    Otherwise the loss is on a plateau: ``action`` runs, then the next ``cooldown - 1`` steps are not checked
    (``cooldown=None`` or ``0``: no step is checked again, as in batchflow). A nan loss is skipped: it is
    neither an improvement nor a plateau.

    Args:
        mode: ``'complex'``, ``'pytorch'``, ``'keras'`` or ``'mean'``.
        patience: the number of losses compared (at least 2 for ``'complex'``).
        min_delta: the least improvement that counts.
        cooldown: steps after an action before the next check; ``None`` or ``0``: never again.
        stream: see ``BaseCallback``.
    """

    def __init__(self, mode: str = 'complex', patience: int = 10, min_delta: float = 0.001,
                 cooldown: int | None = None, stream: Any = None):
        if mode not in PLATEAU_MODES:
            raise ValueError(f"Expected mode in {PLATEAU_MODES}. Received: mode={mode!r}.")
        self.mode = mode
        self.patience = _check_int('patience', patience, 2 if mode == 'complex' else 1)
        self.min_delta = _check_number('min_delta', min_delta)
        self.cooldown = None if cooldown is None else _check_int('cooldown', cooldown, 0)
        super().__init__(stream=stream)

    def reset(self) -> None:
        super().reset()
        self.rule = Plateau.batchflow(self.mode, self.patience, self.min_delta, self.cooldown)

    @property
    def best(self) -> float:
        """The best value of the window so far."""
        return self.rule.best

    @property
    def cooldown_counter(self) -> float:
        """Steps still to record without a check."""
        return self.rule.unchecked

    def state(self) -> dict:
        return {**super().state(), 'best': self.rule.best, 'cooldown_counter': self.rule.unchecked,
                'losses': list(self.rule.values)}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.rule.reset()
        self.rule.best, self.rule.values = state['best'], deque(state['losses'], maxlen=self.rule.window)
        self.rule.load_unchecked(state['cooldown_counter'])

    def arguments(self) -> dict:
        return {'mode': self.mode, 'patience': self.patience, 'min_delta': self.min_delta,
                'cooldown': self.cooldown, **super().arguments()}

    def plateau(self, loss: float) -> bool:
        """Record ``loss`` and say whether the loss is on a plateau now (a nan: no, said once)."""
        if math.isnan(loss):
            nan_step(self, loss)
        return bool(self.rule.update(loss))

    def on_iter_end(self, loss: float, **info: Any) -> None:
        """Check the plateau rule; on a plateau, act, start the cooldown and say so."""
        if self.plateau(float(loss)):
            self.action()
            self.rule.acted()
            self.write(f'{type(self).__name__} at iteration {self.model.iteration}')

    def action(self) -> None:
        """What a plateau does; subclasses define it (here: only the message)."""

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if 'rule' not in state:             # a model file of an earlier flowpipe: its rule is made afresh
            self.reset()


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


class ReduceLROnPlateau(PlateauCallback):
    """Multiplies every learning rate of the model's optimizer by ``factor`` (not below ``min_lr``) on a plateau.

    Args:
        factor: the multiplier.
        min_lr: the smallest learning rate it sets.
        mode, patience, min_delta, cooldown, stream: see ``PlateauCallback``.

    Attributes:
        reduced_at: the model iterations at which the rates were reduced.
    """

    def __init__(self, mode: str = 'complex', patience: int = 10, min_delta: float = 0.001,
                 cooldown: int | None = None, factor: float = 0.1, min_lr: float = 0.0, stream: Any = None):
        self.factor = _check_number('factor', factor)
        self.min_lr = _check_number('min_lr', min_lr)
        if not 0 < self.factor <= 1:
            raise ValueError(f"Expected 0 < factor <= 1. Received: factor={factor!r}.")
        super().__init__(mode=mode, patience=patience, min_delta=min_delta, cooldown=cooldown, stream=stream)

    def reset(self) -> None:
        super().reset()
        self.reduced_at: list[int] = []

    def state(self) -> dict:
        return {**super().state(), 'reduced_at': list(self.reduced_at)}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.reduced_at = list(state['reduced_at'])

    def arguments(self) -> dict:
        arguments = super().arguments()
        stream = arguments.pop('stream')
        return {**arguments, 'factor': self.factor, 'min_lr': self.min_lr, 'stream': stream}

    def action(self) -> None:
        for group in self.model.optimizer.param_groups:
            group['lr'] = max(self.min_lr, self.factor * group['lr'])
        self.reduced_at.append(self.model.iteration)


class LogCallback(BaseCallback):
    """Writes the mean loss of the last ``frequency`` steps, every ``frequency`` steps, under a header line.

    Args:
        stream: see ``BaseCallback``.
        frequency: steps between lines.
        resources: add the process's memory (GB) and, where CUDA is in use, each GPU's memory and utilization (%).
        shapes: add the shapes of the step's inputs and targets.
        microbatch: add the micro-batch size and the number of micro-batches of the step.
    """

    def __init__(self, stream: Any = None, frequency: int = 1, resources: bool = True, shapes: bool = False,
                 microbatch: bool = False):
        self.frequency = _check_int('frequency', frequency, 1)
        self.resources, self.shapes, self.microbatch = bool(resources), bool(shapes), bool(microbatch)
        super().__init__(stream=stream)

    def reset(self) -> None:
        super().reset()
        self._losses: deque = deque(maxlen=self.frequency)

    def state(self) -> dict:
        return {**super().state(), 'losses': list(self._losses)}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self._losses = deque(state['losses'], maxlen=self.frequency)

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), '_losses': list(self._losses)}    # a list: what the safe reader rebuilds

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._losses = deque(self._losses, maxlen=self.frequency)

    def arguments(self) -> dict:
        return {'stream': self.stream, 'frequency': self.frequency, 'resources': self.resources,
                'shapes': self.shapes, 'microbatch': self.microbatch}

    def header(self) -> str:
        """The first line: the columns."""
        header = 'TIMESTAMP   ITERATION : LOSS'
        if self.resources:
            header += ' | MEMORY : GPU_MEMORY : GPU_UTILIZATION'
        if self.shapes:
            header += ' | IN_SHAPES : TARGET_SHAPES'
        if self.microbatch:
            header += ' | MICROBATCH_SIZE : N_MICROBATCHES'
        return header

    def on_iter_end(self, loss: float, **info: Any) -> None:
        self._losses.append(float(loss))
        iteration = self.model.iteration
        if iteration % self.frequency:
            return
        if not self._written:
            self.write(self.header())
        stamp = time.strftime('%Y-%m-%d  %H:%M:%S', time.gmtime())
        line = f'{stamp}   {iteration:5}: {_mean(self._losses):6.6f}'
        if self.resources:
            line += ' | ' + ' : '.join(_resources())
        if self.shapes:
            line += f" | {info.get('inputs_shapes')} : {info.get('targets_shapes')}"
        if self.microbatch:
            size, batch = self.model.plan.microbatch, info.get('batch_size') or 0
            line += f' | {size} : {math.ceil(batch / size) if size else 1}'
        self.write(line)


def _resources() -> list[str]:
    """The process's resident memory in GB, then each used GPU's memory and utilization in percent."""
    memory = [f'{_resident_gb():6.3f}']
    torch = __import__('torch')
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return memory
    used, busy = [], []
    for device in range(torch.cuda.device_count()):
        free, total = torch.cuda.mem_get_info(device)
        used.append(f'{100 * (total - free) / total:6.3f}')
        try:
            busy.append(f'{float(torch.cuda.utilization(device)):6.3f}')
        except Exception:  # noqa: BLE001 - utilization needs pynvml, an optional package
            busy.append('     ?')
    return memory + [' : '.join(used), ' : '.join(busy)]


def _resident_gb() -> float:
    try:
        with open('/proc/self/statm', encoding='ascii') as file:
            pages = int(file.read().split()[1])
        return pages * os.sysconf('SC_PAGE_SIZE') / 1024 ** 3
    except (OSError, ValueError, AttributeError):       # not Linux: the peak instead
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2


def make_callbacks(value: Any, model: Any) -> list[BaseCallback]:
    """The model's own copies of the config's ``callbacks`` (one callback, a list of them, or ``None``)."""
    if value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if not isinstance(item, BaseCallback):
            raise TypeError(f"Expected 'callbacks' as a list of model callbacks (EarlyStopping, ReduceLROnPlateau, "
                            f"LogCallback from flowpipe.models.torch.callbacks, or BaseCallback subclasses). "
                            f"Received: {type(item).__name__} {item!r}. Run-level callbacks go to "
                            "run(..., callbacks=[...]) instead.")
    return [item.bind(model) for item in items]

