"""What a named expression sees while one batch is processed.

The execution engine builds one ``Context`` per batch; expressions read from it and assignable expressions
write through it. ``Store`` holds a pipeline's variables and models: a dict plus a re-entrant lock that
read-modify-write updates (``V('x', mode='a')``) and one-time initialisation take.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ['Context', 'Store']


class Store(dict):
    """A dict of named values (variables or models) with a lock for compound updates."""

    def __init__(self, *args, kind: str = 'value', **kwargs):
        super().__init__(*args, **kwargs)
        self.kind = kind
        self.lock = threading.RLock()

    def __reduce__(self):
        return (self.__class__, (dict(self),), {'kind': self.kind})

    def __setstate__(self, state):
        self.kind = state['kind']
        self.lock = threading.RLock()


@dataclass(slots=True)
class Context:
    """Everything named expressions and built-in actions may read while one batch is processed.

    Attributes:
        batch: the batch being processed (``B``).
        dataset: the dataset the pipeline is bound to (``D``).
        config: the pipeline's ``Config`` (``C``).
        variables: the pipeline's variables, a ``Store`` (``V``).
        models: the pipeline's models, a ``Store`` (``M``).
        iteration: 0-based number of the batch within the current run (``I('c')``).
        total: number of batches the run will produce, ``None`` when unknown or infinite (``I('m')``).
        seed: the batch's ``numpy.random.SeedSequence``, from the run's seed tree.
        random: the batch's own ``numpy.random.Generator`` (``R``): the batch's ``random`` if it has one, else
            made from ``seed`` on first use.
        pipeline: the running ``Pipeline`` (for built-in actions that need it).
        epoch_items: items one epoch of the run feeds (the dataset's, less what ``drop_last`` drops), for a
            per-epoch learning-rate schedule; ``None`` outside the first stage of a run.
        epoch: the 0-based epoch of the batch's first item (``I('epoch')``), ``None`` outside a run's first stage.
        logs: in a run with callbacks, the batch's logs, which the run's callbacks hear of (``train_model`` adds
            each step's loss to ``logs['steps']``, ``None`` for a step skipped for a non-finite loss); else
            ``None``.
    """
    batch: Any = None
    dataset: Any = None
    config: Any = None
    variables: Store = field(default_factory=lambda: Store(kind='variable'))
    models: Store = field(default_factory=lambda: Store(kind='model'))
    iteration: int = 0
    total: int | None = None
    seed: Any = None
    pipeline: Any = None
    epoch_items: int | None = None
    _random: Any = None
    epoch: int | None = None
    logs: dict | None = None

    @property
    def random(self) -> Any:
        # A Generator costs ~15 µs to make, more than the per-batch overhead budget allows: only on demand.
        if self._random is None:
            batch_random = getattr(self.batch, 'random', None)
            self._random = batch_random if batch_random is not None else np.random.default_rng(self.seed)
        return self._random

    @random.setter
    def random(self, value: Any) -> None:
        self._random = value
