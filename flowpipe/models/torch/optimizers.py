"""Resolve the ``optimizer`` and ``decay`` keys of a model config.

``optimizer``: a ``torch.optim`` class name (``'Adam'``, ``'sgd'``; case-insensitive), a dict
``{'name': 'SGD', 'lr': 0.1, ...}``, an optimizer class, or a callable ``params -> Optimizer``. Default: Adam.

``decay``: a learning-rate scheduler, stepped after every ``frequency``-th training batch (default 1: per batch,
as the model sees batches, not epochs). A ``torch.optim.lr_scheduler`` class name or short name
(``'exp'``, ``'step'``, ``'cos'``, ``'lambda'``, ``'onecycle'``), a dict ``{'name': ..., 'frequency': n, **kwargs}``,
a scheduler class, or a callable ``optimizer -> scheduler``.
"""
from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from typing import Any, Iterable

import torch
from torch.optim import lr_scheduler

__all__ = ['Decay', 'make_decay', 'make_optimizer']

_DECAY_ALIASES = {'exp': 'ExponentialLR', 'step': 'StepLR', 'multistep': 'MultiStepLR', 'cos': 'CosineAnnealingLR',
                  'cosine': 'CosineAnnealingLR', 'lambda': 'LambdaLR', 'onecycle': 'OneCycleLR',
                  'linear': 'LinearLR', 'poly': 'PolynomialLR'}


def _split(spec: Any, what: str) -> tuple[Any, dict]:
    if not isinstance(spec, Mapping):
        return spec, {}
    if 'name' not in spec:
        raise ValueError(f"Expected a 'name' in the {what} dict. Received: {what}={dict(spec)!r}. "
                         f"Add e.g. 'name': {'SGD' if what == 'optimizer' else 'exp'!r}.")
    return spec['name'], {key: value for key, value in spec.items() if key != 'name'}


def _find_class(name: str, namespace: dict, base: type, what: str, aliases: Mapping | None = None) -> type:
    known = {key.lower(): cls for key, cls in namespace.items()
             if isinstance(cls, type) and issubclass(cls, base) and cls is not base and not key.startswith('_')}
    key = (aliases or {}).get(name.lower(), name).lower()
    if key in known:
        return known[key]
    names = sorted({cls.__name__ for cls in known.values()} | set(aliases or {}))
    hint = f" Did you mean {close}?" if (close := _close_names(name, names)) else f" Known: {names}."
    raise ValueError(f"Expected a {what} name. Received: {what}={name!r}.{hint}")


def _close_names(name: str, names: list[str]) -> list[str]:
    """Names close to ``name`` whatever the case and ``_``/``-`` (``'adam_w'`` and ``'adamW'`` find ``AdamW``)."""
    def plain(text: str) -> str:
        return text.lower().replace('_', '').replace('-', '')
    by_plain = {plain(known): known for known in names}
    close = difflib.get_close_matches(plain(name), list(by_plain), n=3, cutoff=0.5)
    return [by_plain[key] for key in close]


def _construct(cls: Any, first: Any, kwargs: dict, what: str, spec: Any) -> Any:
    """``cls(first, **kwargs)``; a class's ``TypeError`` about its arguments says which ones it requires."""
    try:
        return cls(first, **kwargs)
    except TypeError as error:
        if not isinstance(cls, type):
            raise
        parameters = list(inspect.signature(cls).parameters.values())[1:]
        required = [p.name for p in parameters if p.default is p.empty
                    and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        missing = [name for name in required if name not in kwargs]
        accepted = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [name for name in kwargs if name not in accepted]
        fix = f" Unknown: {unknown}; {cls.__name__} accepts {accepted}." if unknown else ''
        if missing:
            fix += f" Add {missing} to the dict: {what}={ {'name': spec, **kwargs, **dict.fromkeys(missing, '...')} }."
        raise TypeError(f"Expected {what} {spec!r} ({cls.__name__}) with the arguments it requires. Received: "
                        f"{what} options {kwargs!r} ({error}).{fix}") from None


def make_optimizer(spec: Any, params: Iterable[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """An optimizer over ``params`` for a config's ``optimizer`` value (``None``: Adam with defaults)."""
    spec, kwargs = _split('Adam' if spec is None else spec, 'optimizer')
    name = spec
    if isinstance(spec, str):
        spec = _find_class(spec, vars(torch.optim), torch.optim.Optimizer, 'optimizer')
    if not callable(spec):
        raise TypeError(f"Expected an optimizer name, class or callable(params). Received: optimizer={spec!r}.")
    optimizer = _construct(spec, params, kwargs, 'optimizer', name)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"Expected the optimizer factory to return a torch.optim.Optimizer. "
                        f"Received: {type(optimizer).__name__}.")
    return optimizer


class Decay:
    """A scheduler stepped every ``frequency`` training batches."""

    def __init__(self, scheduler: Any, frequency: int = 1):
        if not isinstance(frequency, int) or frequency < 1:
            raise ValueError(f"Expected decay 'frequency' as a positive int (batches between steps). "
                             f"Received: frequency={frequency!r}.")
        self.scheduler = scheduler
        self.frequency = frequency

    def after_batch(self, iteration: int) -> None:
        """Step the scheduler if ``iteration`` (1-based count of training batches) is a multiple of frequency."""
        if iteration % self.frequency == 0:
            self.scheduler.step()

    def state(self) -> dict:
        """The scheduler's state, for save/load (its ``state_dict()``)."""
        return self.scheduler.state_dict()

    def load_state(self, state: dict) -> None:
        """Restore the scheduler's state."""
        self.scheduler.load_state_dict(state)

    def __repr__(self) -> str:
        return f"{type(self.scheduler).__name__}(every {self.frequency} batch{'es' * (self.frequency > 1)})"


def make_decay(spec: Any, optimizer: torch.optim.Optimizer) -> Decay | None:
    """A ``Decay`` for a config's ``decay`` value, or ``None`` when there is none."""
    if spec is None:
        return None
    spec, kwargs = _split(spec, 'decay')
    frequency = kwargs.pop('frequency', 1)
    name = spec
    if isinstance(spec, str):
        spec = _find_class(spec, vars(lr_scheduler), lr_scheduler.LRScheduler, 'decay', _DECAY_ALIASES)
    if not callable(spec):
        raise TypeError(f"Expected a decay name, scheduler class or callable(optimizer). Received: decay={spec!r}.")
    return Decay(_construct(spec, optimizer, kwargs, 'decay', name), frequency)
