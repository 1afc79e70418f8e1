"""batchflow's names for what a flowpipe ``Pipeline`` does under other names, and clear errors for the rest.

Each alias is one line over flowpipe's own method (``get_model_by_name`` is ``m``, ``run_later(...)`` is
``run(..., lazy=True)``); methods that would change a pipeline in place (``set_config``, ``set_dataset``...) raise
an error that gives the one-line flowpipe form (pipelines are immutable, see ``docs/porting.md``).
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable

__all__ = ['PORTING', 'PipelineAliases', 'bar_or_notifier', 'immutable_error']

PORTING = 'docs/porting.md'


def immutable_error(method: str, fix: str) -> TypeError:
    """The error for a batchflow method that changes a pipeline in place."""
    return TypeError(f"Expected a new pipeline instead of {method}: a flowpipe Pipeline is immutable. Write "
                     f"{fix} (see {PORTING}#immutable-pipelines).")


def bar_or_notifier(bar: Any, notifier: Any) -> Any:
    """``bar``, or batchflow's ``notifier`` for it (``notifier=True``, ``'t'``, a ``Notifier``...)."""
    if notifier is None:
        return bar
    if bar is not None:
        raise ValueError(f"Expected bar= or notifier= (the same option), not both. Received: bar={bar!r}, "
                         f"notifier={notifier!r}")
    return notifier


class PipelineAliases:
    """batchflow's pipeline methods, as thin aliases of flowpipe's (a base class of ``Pipeline``)."""
    __slots__ = ()

    # namespaces: plain functions as actions

    def add_namespace(self, *namespaces: Any) -> Any:
        """A pipeline whose chained calls may also name functions of ``namespaces`` (modules, objects or module
        names): ``p.add_namespace(np).mean(B.images, save_to=V('m'))`` is ``p.call(np.mean, B.images, ...)``.

        Built-ins and batch actions come first. flowpipe looks only in the namespaces added here (batchflow
        also looks in ``__main__``: add it with ``add_namespace('__main__')``).
        """
        for namespace in namespaces:
            if not isinstance(namespace, str) and not hasattr(namespace, '__dict__'):
                raise TypeError(f"Expected a module, an object or a module name as a namespace. Received: "
                                f"{namespace!r}")
        return self._replace(namespaces=self._namespaces + tuple(namespaces))

    def _namespace_function(self, name: str) -> Callable | None:
        for namespace in self._namespaces:
            if isinstance(namespace, str):
                namespace = sys.modules.get(namespace) or importlib.import_module(namespace)
            function = getattr(namespace, name, None)
            if callable(function):
                return function
        return None

    # variables

    def init_variables(self, *variables: Any) -> Any:
        """Declare several variables: names (default ``None``), dicts ``{name: default}`` or lists of those."""
        pipeline = self
        for variable in variables:
            if isinstance(variable, dict):
                for name, default in variable.items():
                    pipeline = pipeline.init_variable(name, default)
            elif isinstance(variable, (list, tuple)):
                pipeline = pipeline.init_variables(*variable)
            else:
                pipeline = pipeline.init_variable(variable)
        return pipeline

    def update_variable(self, name: str, value: Any = None, mode: str = 'w') -> Any:
        """Add the action ``update(V(name), value, mode)``."""
        from ..expr import V
        return self.update(V(name), value, mode)

    def has_variable(self, name: str) -> bool:
        """Whether the variable ``name`` exists."""
        return name in self.variables

    def assign_variable(self, name: str, value: Any) -> None:
        """Set the variable ``name`` now (same as ``set_variable``)."""
        self.set_variable(name, value)

    def delete_variable(self, name: str) -> None:
        """Remove the variable ``name`` from this pipeline's state (a declared one is declared again when read)."""
        variables = self.variables
        with variables.lock:
            variables.pop(name, None)

    del_variable = delete_variable

    def delete_all_variables(self) -> None:
        """Remove every variable (same as ``reset('variables')``)."""
        self.reset('variables')

    # models

    def get_model_by_name(self, name: str) -> Any:
        """The model ``name`` (same as ``m``)."""
        return self.m(name)

    @property
    def model(self) -> Any:
        """The pipeline's only model."""
        if len(self.models) != 1:
            raise ValueError(f"Expected a pipeline with exactly one model for .model. Received: models "
                             f"{sorted(self.models)!r}; use .m(name)")
        return self.m(next(iter(self.models)))

    def save_model_now(self, name: str, path: Any) -> None:
        """Save the model ``name`` to ``path`` now (not as an action)."""
        self.m(name).save(path)

    def load_model_now(self, name: str, model_class: Any = None, mode: str = 'dynamic', path: Any = None,
                       config: Any = None, trusted: bool = False) -> None:
        """Load the model ``name`` from ``path`` now (as the action ``load_model`` does on a batch); named
        expressions among the arguments (batchflow's ``C('model_class')``) take the pipeline's config."""
        from ..expr.base import evaluate
        from ..expr.context import Context
        from .model_actions import load_model
        if path is None:
            raise TypeError("Expected load_model_now(name, path=...). Received: no path")
        context = Context(dataset=self.dataset, config=self._config, variables=self.variables, models=self.models,
                          pipeline=self)
        model_class, path, config = (evaluate(value, context) for value in (model_class, path, config))
        load_model(context, name, *((path,) if model_class is None else (model_class, path)), config=config,
                   trusted=trusted)

    # running

    def run_now(self, *args: Any, **kwargs: Any) -> Any:
        """Run now (same as ``run``)."""
        return self.run(*args, **kwargs)

    def run_later(self, *args: Any, **kwargs: Any) -> Any:
        """A pipeline holding the run arguments (same as ``run(..., lazy=True)``)."""
        return self.run(*args, lazy=True, **kwargs)

    def show_profile_info(self, per_iter: bool = False, detailed: bool = False, sortby: Any = None,
                          limit: int | None = 10) -> Any:
        """A ``pandas`` table of the last profiled run (``flowpipe.execution.profile_tables.profile_table``)."""
        from ..execution.profile_tables import profile_table
        if self.profiler is None:
            raise ValueError("Expected a run with profile=True (or 'detailed') first. Received: no profiled run "
                             "yet; call pipeline.run(..., profile=True)")
        return profile_table(self.profiler, per_iter, detailed, sortby, limit)

    @property
    def num_actions(self) -> int:
        """The number of main actions."""
        return len(self.actions)

    # what flowpipe does not do in place

    def set_config(self, config: Any = None, clear: bool = False) -> Any:
        """Not in place: raises with the flowpipe form, ``pipeline = pipeline << config``."""
        raise immutable_error('set_config(config)', 'pipeline = pipeline << config')

    def update_config(self, config: Any = None, **kwargs: Any) -> Any:
        """Not in place: raises with the flowpipe form, ``pipeline = pipeline << config``."""
        raise immutable_error('update_config(config)', 'pipeline = pipeline << config')

    def set_dataset(self, dataset: Any) -> Any:
        """Not in place: raises with the flowpipe form, ``pipeline = pipeline << dataset``."""
        raise immutable_error('set_dataset(dataset)', 'pipeline = pipeline << dataset')
