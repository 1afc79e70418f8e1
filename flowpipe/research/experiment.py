"""``Experiment``: the definition of what each config runs, unit after unit, iteration after iteration.

Built by chaining (each call returns the experiment): ``add_callable``, ``add_generator``, ``add_instance``,
``add_pipeline``, ``save``, ``dump``; an unknown attribute names a function in the namespaces (``__main__``,
builtins, ``add_namespace(...)``) and adds it as a unit: ``Experiment().sum(range(10), save_to='sum')``.
``Experiment.start(config, ...)`` makes the ``RunningExperiment`` (``flowpipe.research.running``) of one config.
"""
from __future__ import annotations

import builtins
import copy
import sys
from collections.abc import Callable
from typing import Any

from .named import E, EC
from .units import InstanceCreator, PipelineSource, Unit, parse_name

__all__ = ['Experiment']


def _take(x: Any, copy_value: bool = False, **kwargs: Any) -> Any:
    return copy.deepcopy(x) if copy_value else x


def _make_instance(experiments: Any, item_name: str) -> None:
    experiments = experiments if isinstance(experiments, list) else [experiments]
    instance = experiments[0].instance_creators[item_name](experiments[0])
    for experiment in experiments:
        experiment.instances[item_name] = instance


def _dump(experiment: Any, variable: Any = None) -> None:
    experiment.storage.request_dump(variable)


class Experiment:
    """An ordered set of units (and the instances they use) that each config of a research runs."""

    def __init__(self, instance_creators: dict | None = None, actions: dict | None = None,
                 namespaces: list | None = None):
        self.instance_creators: dict[str, InstanceCreator] = dict(instance_creators or {})
        self.actions: dict[str, Unit] = dict(actions or {})
        self.namespaces: list = list(namespaces or [])
        self.has_dump = False

    # ----- building -----
    def add_executable_unit(self, name: Any, src: Any = None, mode: str = 'func', when: Any = 1, save_to: Any = None,
                            dump: Any = None, args: Any = None, root: bool = False, save_output_dict: bool = False,
                            **kwargs: Any) -> Experiment:
        """Add a unit; ``name`` may be the source itself (its ``__name__`` names the unit)."""
        if not isinstance(name, str):
            if not callable(name):
                raise TypeError(f"Expected a unit name (str) or a callable. Received: {name!r}.")
            src, name = name, getattr(name, '__name__', type(name).__name__)
        if src is None:
            src = parse_name(name)
        elif isinstance(src, str):
            src = parse_name(src)
        elif not callable(src) and not isinstance(src, (tuple, PipelineSource)):
            raise TypeError(f"Expected the source of unit {name!r} to be callable. Received: {src!r}.")
        name = self._unique(name)
        self.actions[name] = Unit(name, src, generator=(mode == 'generator'), root=root, when=when, args=args,
                                  kwargs=kwargs, save_to=save_to, save_output_dict=save_output_dict)
        if dump is not None:
            self.dump(save_to, when=dump)
        return self

    def add_callable(self, name: Any, func: Callable | None = None, args: Any = None, when: Any = 1,
                     save_to: Any = None, dump: Any = None, **kwargs: Any) -> Experiment:
        """Add a unit that calls ``func(*args, **kwargs)`` (``name`` 'instance.method' when ``func`` is None)."""
        return self.add_executable_unit(name, func, 'func', when, save_to, dump, args, **kwargs)

    def add_generator(self, name: Any, generator: Callable | None = None, args: Any = None,
                      **kwargs: Any) -> Experiment:
        """Add a unit that draws the next item of ``generator(*args, **kwargs)`` at each run."""
        return self.add_executable_unit(name, generator, 'generator', args=args, **kwargs)

    def add_instance(self, name: str, creator: Any, root: bool = False, **kwargs: Any) -> Experiment:
        """Make ``creator(**kwargs)`` at the experiment's start; its attributes are units' sources
        (``'name.attr'``); ``root=True`` makes one for all branches."""
        self.instance_creators[name] = InstanceCreator(name, creator, root, **kwargs)
        return self.add_callable(f'init_{name}', _make_instance, experiments=E(all=root), root=root,
                                 item_name=name, when='%0')

    def add_pipeline(self, name: str, root: Any = None, branch: Any = None, run: bool = False, variables: Any = None,
                     dump: Any = None, when: Any = 1, **kwargs: Any) -> Experiment:
        """Add a pipeline unit: one batch per run (``run=False``) or a whole ``run()`` (``run=True``); keyword
        arguments join the pipeline's config; ``variables`` are saved under their names at each run.
        ``root`` and ``branch`` given: the pipeline ``root + branch`` (each experiment runs both)."""
        source = root if root is not None else parse_name(name)
        if isinstance(source, str):
            source = parse_name(source)
        if branch is not None:
            source = source + branch
        names = [variables] if isinstance(variables, str) else list(variables or [])
        self.add_executable_unit(name, PipelineSource(source, 'func' if run else 'generator', names), 'func',
                                 when=when, save_to=[None, *names], config=EC(full=True), **kwargs)
        if names and dump is not None:
            self.dump(names, dump)
        return self

    def add_namespace(self, namespace: Any) -> Experiment:
        """Look up unknown attributes (``Experiment().func(...)``) in ``namespace`` too (a module, its name, a dict)."""
        self.namespaces.append(namespace)
        return self

    def save(self, src: Any, dst: Any, when: Any = 1, save_output_dict: bool = False,
             copy: bool = False) -> Experiment:
        """Record the value of ``src`` (an expression: ``O('unit')``, ``E('ppl').v('loss')``) under ``dst``."""
        name = '__save_results' if dst is None else f'__save_results_{dst}'
        return self.add_callable(name, _take, x=src, copy_value=copy, when=when, save_to=dst,
                                 save_output_dict=save_output_dict)

    def dump(self, variable: Any = None, when: Any = 'last') -> Experiment:
        """Write the results gathered so far (all, or ``variable``) to the experiment's folder at ``when``."""
        self.has_dump = True
        name = '__dump_results' if variable is None else f'__dump_results_{variable}'
        return self.add_callable(name, _dump, when=when, variable=variable, experiment=E())

    def __getattr__(self, name: str) -> Callable:
        if name.startswith('_'):
            raise AttributeError(name)
        method = self._lookup(name)
        if method is None:
            raise AttributeError(f"Expected {name!r} to be a method of Experiment or a function in its namespaces "
                                 f"(__main__, builtins, add_namespace(...)). Received an unknown name.")

        def add(*args: Any, **kwargs: Any) -> Experiment:
            return self.add_executable_unit(name, src=method, args=list(args), **kwargs)
        return add

    def _lookup(self, name: str) -> Any:
        for namespace in [sys.modules['__main__'], builtins, *self.namespaces]:
            namespace = sys.modules[namespace] if isinstance(namespace, str) else namespace
            if isinstance(namespace, dict):
                if name in namespace:
                    return namespace[name]
            elif hasattr(namespace, name):
                return getattr(namespace, name)
        return None

    def _unique(self, name: str) -> str:
        taken = sum(1 for key in self.actions if key == name or
                    (key.startswith(name + '_') and key[len(name) + 1:].isdigit()))
        return name if taken == 0 else f'{name}_{taken}'

    # ----- reading -----
    @property
    def only_callables(self) -> bool:
        """Whether every unit is a plain call (then ``n_iters`` defaults to 1)."""
        return all(unit.is_callable for unit in self.actions.values())

    def copy(self) -> Experiment:
        """A copy with the same units (the units are definitions, shared)."""
        result = Experiment(self.instance_creators, self.actions, self.namespaces)
        result.has_dump = self.has_dump
        return result

    __copy__ = copy

    def __deepcopy__(self, memo: dict) -> Experiment:
        return self.copy()

    def __getitem__(self, key: str) -> Unit:
        return self.actions[key]

    def __getstate__(self) -> dict:
        return self.__dict__

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        instances = ''.join(f'  instance {name}: {creator.creator!r}\n'
                            for name, creator in self.instance_creators.items())
        units = ''.join(f'  unit {name}: when={unit.when}, root={unit.root}\n' for name, unit in self.actions.items())
        return f'Experiment(\n{instances}{units})'

