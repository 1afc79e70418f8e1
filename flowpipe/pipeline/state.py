"""Runtime state a pipeline owns: variables, models, the ``next_batch`` iterator, the last profile.

The definition (``Pipeline``) is immutable; everything that changes while batches flow lives here. Every new
pipeline (a chained call, ``<<``, ``+``...) starts with a fresh state, so a template stays reusable.
"""
from __future__ import annotations

import copy
import threading
from typing import Any, Iterable

from ..expr.context import Context, Store
from .records import ActionRecord, MaybeRecord

__all__ = ['RESET_TARGETS', 'PipelineState', 'declared_variables']

RESET_TARGETS = ('iter', 'variables', 'models', 'all')


class PipelineState:
    """Mutable runtime state of one pipeline.

    Attributes:
        variables: the pipeline's variables (``V``), a ``Store``.
        models: the pipeline's models (``M``), a ``Store``.
        iterator: the generator behind ``next_batch``, or ``None``.
        iterator_args: the run arguments ``iterator`` was started with.
        workers: the worker processes of ``target='processes'`` runs (``flowpipe.execution.workers.WorkerPool``),
            kept from one run to the next; ``None`` until the first such run, and after ``reset('iter')``.
        profiler: the profiler of the last run made with ``profile=True``, or ``None``.
        batches: number of batches delivered since the pipeline was created or ``reset('iter')``.
        next_args: ``(given arguments, RunArgs)`` of the last ``next_batch`` call, so that a loop calling it
            with the same arguments does not rebuild and re-check them for every batch.
        models_left: names of the models a pickled pipeline had (a copy made by pickling has none of them).
    """
    __slots__ = ('variables', 'models', 'iterator', 'iterator_args', 'workers', 'profiler', 'batches', 'lock',
                 'next_args', 'models_left')

    def __init__(self) -> None:
        self.variables = Store(kind='variable')
        self.models = Store(kind='model')
        self.iterator: Any = None
        self.iterator_args: Any = None
        self.workers: Any = None
        self.profiler: Any = None
        self.batches = 0
        self.lock = threading.RLock()
        self.next_args: tuple | None = None
        self.models_left: tuple[str, ...] = ()

    def reset(self, *targets: str) -> None:
        """Forget the iterator and stop the worker processes (``'iter'``), variables (``'vars'`` too), models, or
        ``'all'`` of them."""
        targets = tuple('variables' if target == 'vars' else target for target in targets)
        for target in targets:
            if target not in RESET_TARGETS:
                raise ValueError(f"Expected one of {RESET_TARGETS} to reset. Received: {target!r}")
        chosen = set(RESET_TARGETS[:3]) if 'all' in targets else set(targets)
        if 'iter' in chosen:
            self.close_iterator()
            self.close_workers()
            self.batches = 0
        if 'variables' in chosen:
            with self.variables.lock:
                self.variables.clear()
        if 'models' in chosen:
            with self.models.lock:
                self.models.clear()

    def close_iterator(self) -> None:
        """Close the ``next_batch`` generator (stopping its prefetch workers) and forget it."""
        iterator, self.iterator, self.iterator_args = self.iterator, None, None
        if iterator is not None:
            iterator.close()

    def close_workers(self) -> None:
        """Stop the worker processes kept for ``target='processes'`` runs, if any."""
        workers, self.workers = self.workers, None
        if workers is not None:
            workers.close()

    def declare_variables(self, records: Iterable, context: Context) -> None:
        """Give every ``init_variable`` among ``records`` its default, unless the variable already exists.

        Defaults are copied, so a mutable default (``[]``) is never shared between pipelines; a default that
        holds named expressions is evaluated in ``context`` (no batch: ``C``, ``D``, ``V`` work).
        """
        with self.variables.lock:
            for name, default in declared_variables(records):
                if name not in self.variables:
                    self.variables[name] = _initial_value(default, context)


def declared_variables(records: Iterable) -> list[tuple[str, Any]]:
    """``(name, default)`` of every ``init_variable`` record, in declaration order (nested ones included)."""
    found = []
    for record in records:
        if isinstance(record, MaybeRecord):
            found.extend(declared_variables(record.actions))
        elif isinstance(record, ActionRecord) and record.name == 'init_variable':
            found.append((record.kwargs['name'], record.kwargs['default']))
    return found


def _initial_value(default: Any, context: Context) -> Any:
    from ..expr import contains_expressions, evaluate
    if contains_expressions(default):
        return evaluate(default, context)
    return copy.deepcopy(default)
