"""Research expressions: placeholders in units' arguments, evaluated each time the unit runs.

``E()`` the experiment (``E('unit')`` a unit's source or an instance; ``E(all=True)`` every branch's),
``EC('name')`` a config value (``EC()`` the config without ``device``/``repetition``/``updates``, ``EC(full=True)``
all of it), ``O('unit')`` a unit's last output, ``S()`` the experiment's storage (``update_variable``), ``EP()`` the
experiment's folder, ``R()`` the research's results. Attribute access, indexing and calls chain lazily:
``E().outputs['sum']``, ``E('ppl').v('loss')``, ``O('root')[0]``; batchflow's ``E('ppl').pipeline`` is the
pipeline itself.
"""
from __future__ import annotations

import os
from typing import Any

__all__ = ['E', 'EC', 'EP', 'O', 'R', 'S', 'eval_expr']


def _is_pipeline(value: Any) -> bool:
    from flowpipe.pipeline import Pipeline     # research's expressions load before pipelines are needed
    return isinstance(value, Pipeline)


class E:
    """The experiment, one of its units or instances (``unit``), or every branch's (``all=True``)."""

    def __init__(self, unit: str | None = None, all: bool = False, **kwargs: Any):   # noqa: A002 (batchflow's name)
        self.unit, self.all, self._ops = unit, all, ()

    def get(self, experiment: Any = None, research: Any = None, **kwargs: Any) -> Any:
        """The value for ``experiment`` (then the chained attributes, items and calls applied)."""
        if experiment is None:
            raise ValueError(f"Expected an experiment to evaluate {self!r}. Received: none (research expressions "
                             "work inside a research's units only).")
        experiments = experiment.branches if self.all else [experiment]
        values = [self._apply(self._transform(item)) for item in experiments]
        return values if self.all else values[0]

    def _transform(self, experiment: Any) -> Any:
        if self.unit is None:
            return experiment
        return experiment.lookup(self.unit)

    def _apply(self, value: Any) -> Any:
        for kind, *args in self._ops:
            if kind == 'attr' and args[0] == 'pipeline' and _is_pipeline(value):
                continue            # batchflow's E('ppl').pipeline: its E('ppl') is the unit, flowpipe's the pipeline
            if kind == 'attr':
                value = getattr(value, args[0])
            elif kind == 'item':
                value = value[eval_expr(args[0])]
            else:
                value = value(*args[0], **args[1])
        return value

    def _chain(self, op: tuple) -> E:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._ops = (*self._ops, op)
        return clone

    def __getattr__(self, name: str) -> E:
        if name.startswith('_') or name in ('unit', 'all', 'name', 'full'):
            raise AttributeError(name)
        return self._chain(('attr', name))

    def __getitem__(self, key: Any) -> E:
        return self._chain(('item', key))

    def __call__(self, *args: Any, **kwargs: Any) -> E:
        return self._chain(('call', args, kwargs))

    def __copy__(self) -> E:
        return self

    def __deepcopy__(self, memo: dict) -> E:
        return self

    def __getstate__(self) -> dict:
        return self.__dict__

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        ops = ''.join(f'.{op[1]}' if op[0] == 'attr' else f'[{op[1]!r}]' if op[0] == 'item' else '(...)'
                      for op in self._ops)
        return f'{type(self).__name__}({self.unit!r}){ops}' if self.unit else f'{type(self).__name__}(){ops}'


class EC(E):
    """A config value (``name``), or the whole config (``full=True``: with ``device``, ``repetition``, ``updates``)."""

    def __init__(self, name: str | None = None, full: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.name, self.full = name, full

    def _transform(self, experiment: Any) -> Any:
        config = experiment.config
        if self.name is not None:
            if self.name not in config:
                raise KeyError(f"Expected {self.name!r} in the experiment's config. Received a config with keys "
                               f"{sorted(map(str, config.keys()))}. Add it to the domain or the run's configs.")
            return config[self.name]
        if self.full:
            return config
        return {key: config[key] for key in config.keys() if key not in ('device', 'repetition', 'updates')}


class O(E):  # noqa: E742 (batchflow's name)
    """The last output of unit ``name``."""

    def __init__(self, name: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.name = name

    def _transform(self, experiment: Any) -> Any:
        if self.name not in experiment.outputs:
            raise KeyError(f"Expected unit {self.name!r} to have run before its output is used. Received the "
                           f"outputs of {sorted(experiment.outputs)}; units: {list(experiment.actions)}.")
        return experiment.outputs[self.name]


class S(E):
    """The experiment's storage (``S().update_variable(name, value)`` records a value at this iteration)."""

    def _transform(self, experiment: Any) -> Any:
        return experiment.storage


class EP(E):
    """The experiment's folder, made if missing (``None`` when results stay in memory): files a unit writes
    there are the experiment's artifacts."""

    def _transform(self, experiment: Any) -> Any:
        path = experiment.storage.path
        if path is not None:
            os.makedirs(path, exist_ok=True)
        return path


class R(E):
    """The research's results (in domain updates)."""

    def get(self, experiment: Any = None, research: Any = None, **kwargs: Any) -> Any:
        if research is None:
            raise ValueError("Expected a research to evaluate R(). Received: none (R() works in domain updates).")
        return self._apply(research.results)


def eval_expr(obj: Any, **kwargs: Any) -> Any:
    """``obj`` with every research expression inside (lists, tuples, dicts) replaced by its value."""
    if isinstance(obj, E):
        return obj.get(**kwargs)
    if isinstance(obj, (list, tuple)):
        return type(obj)(eval_expr(item, **kwargs) for item in obj)
    if isinstance(obj, dict):
        return {key: eval_expr(value, **kwargs) for key, value in obj.items()}
    return obj
