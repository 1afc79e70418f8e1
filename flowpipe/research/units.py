"""What an experiment runs at each iteration: ``Unit`` (a callable, a generator or a pipeline), ``InstanceCreator``.

A unit's source is a callable, a generator function, ``('instance', 'attr')`` (an attribute of an instance the
experiment makes with ``add_instance``) or a ``PipelineSource``. A unit is a definition: ``Unit.bind`` makes the
copy that one experiment runs and keeps state in (its generator, its last output).
"""
from __future__ import annotations

import time
import types
from typing import Any

from .named import eval_expr
from .when import check_when, must_execute

__all__ = ['InstanceCreator', 'PipelineSource', 'Unit', 'parse_name']


def parse_name(name: str) -> tuple[str, str]:
    """``'instance.attr'`` as ``('instance', 'attr')``."""
    parts = name.split('.')
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"Expected a source, or a name 'instance.attribute' of an instance added with add_instance. "
                         f"Received: {name!r}.")
    return parts[0], parts[1]


class InstanceCreator:
    """Makes an instance of ``creator`` for each experiment (or one for all branches when ``root``)."""

    def __init__(self, name: str, creator: Any, root: bool = False, args: Any = None, kwargs: Any = None,
                 **other_kwargs: Any):
        self.name, self.creator, self.root = name, creator, root
        self.args, self.kwargs = list(args or []), {**(kwargs or {}), **other_kwargs}

    def __call__(self, experiment: Any) -> Any:
        args = eval_expr(self.args, experiment=experiment)
        return self.creator(*args, **eval_expr(self.kwargs, experiment=experiment))


class PipelineSource:
    """A pipeline unit's source: a pipeline (or ``('instance', 'attr')``) run with the experiment's config.

    ``mode='generator'`` yields ``(batch, *variables)`` per iteration, ``'func'`` runs the whole pipeline and returns
    ``(pipeline, *variables)``. The first call binds the pipeline to the config (``pipeline << config``).

    An instance's pipeline that belongs to this experiment alone (the instance is not ``root``, or the unit is)
    is bound *in its place*: the bound pipeline shares the runtime state (variables, models) of the instance's
    pipeline and replaces it as the instance's attribute, so that the instance's methods (``self.test_ppl.v(...)``)
    and its other pipelines (``import_model('model', self.train_ppl)``) see the models it builds and the variables
    it sets, as batchflow's research, which sets the config into the pipeline itself, has them.
    """

    def __init__(self, pipeline: Any, mode: str = 'generator', variables: Any = None, root: bool = False):
        self.pipeline, self.mode, self.root = pipeline, mode, root
        self.variables = [variables] if isinstance(variables, str) else list(variables or [])
        self.bound: Any = None

    def bind(self, experiment: Any, config: dict) -> Any:
        """The pipeline with the experiment's config (made once)."""
        if self.bound is None:
            if not isinstance(self.pipeline, tuple):
                self.bound = self.pipeline << dict(config)
                return self.bound
            owner, attribute = self.pipeline
            instance = experiment.instances[owner]
            pipeline = getattr(instance, attribute)
            self.bound = pipeline << dict(config)
            if self.root or not experiment.instance_creators[owner].root:
                # a Pipeline's definition is immutable; its runtime state is the one part meant to change
                object.__setattr__(self.bound, '_state', pipeline.state)
                try:
                    setattr(instance, attribute, self.bound)
                except AttributeError:      # a read-only attribute (a property) keeps giving its own pipeline
                    pass
        return self.bound

    def values(self) -> list:
        """The watched variables' values."""
        return [self.bound.v(name) for name in self.variables]

    def __call__(self, config: Any, experiment: Any = None, **kwargs: Any) -> Any:
        pipeline = self.bind(experiment, {**config, **kwargs})
        options = {} if _seeded(pipeline) or experiment is None else {'seed': experiment.pipeline_seed()}
        if self.mode == 'func':
            return (pipeline.run(**options), *self.values())
        return ((batch, *self.values()) for batch in _batches(pipeline, options))


def _batches(pipeline: Any, options: dict) -> Any:
    """The pipeline's batches for a generator unit: endless when its ``run_later`` gives neither ``n_epochs`` nor
    ``n_iters`` (batchflow's ``run_later(64, n_epochs=None)`` in a research: the research's ``n_iters`` ends it),
    else as ``gen_batch`` runs it."""
    args = pipeline.run_args
    if args is not None and args.n_epochs is None and args.n_iters is None:
        from ..execution.run import RunArgs, iterate
        return iterate(pipeline, RunArgs.merge(args, **options), infinite=True)
    return pipeline.gen_batch(**options)


def _seeded(pipeline: Any) -> bool:
    """Whether the pipeline's ``run_later`` gave ``seed=`` (then it is kept, else the experiment's seed is used)."""
    args = getattr(pipeline, 'run_args', None)
    return getattr(args, 'seed', None) is not None


class Unit:
    """One unit of an experiment: its source, when it runs, its arguments and where its output is saved.

    Args:
        name: the unit's name (``O(name)`` is its last output).
        source: a callable, a generator function, ``('instance', 'attr')`` or a ``PipelineSource``.
        generator: whether ``source`` makes a generator to draw one item from per run.
        root: one unit shared by all branches of a task (run once, its output given to each).
        when: when it runs (see ``flowpipe.research.when``).
        args, kwargs: arguments; research expressions inside are evaluated at each run.
        save_to: result names for the output (a name, or a list matched to a tuple output).
        save_output_dict: a dict output saved under its keys.
    """

    def __init__(self, name: str, source: Any, generator: bool = False, root: bool = False, when: Any = 1,
                 args: Any = None, kwargs: Any = None, save_to: Any = None, save_output_dict: bool = False):
        if save_to is not None and save_output_dict:
            raise ValueError(f"Expected save_to=None with save_output_dict=True. Received: save_to={save_to!r}.")
        self.name, self.source, self.generator, self.root = name, source, generator, root
        self.when = check_when(when)
        self.args, self.kwargs = list(args or []), dict(kwargs or {})
        self.save_to, self.save_output_dict = save_to, save_output_dict
        self.output: Any = None
        self._iterator: Any = None
        self._callable: Any = None

    def bind(self) -> Unit:
        """A fresh copy for one experiment."""
        source = self.source
        if isinstance(source, PipelineSource):
            source = PipelineSource(source.pipeline, source.mode, source.variables, self.root)
        return Unit(self.name, source, self.generator, self.root, self.when, self.args, self.kwargs,
                    self.save_to, self.save_output_dict)

    @property
    def is_callable(self) -> bool:
        """Whether the unit is a plain call (not a generator, not a batch-by-batch pipeline)."""
        if isinstance(self.source, PipelineSource):
            return self.source.mode == 'func'
        return not self.generator

    def target(self, experiment: Any) -> Any:
        """What ``E(name)`` gives: the bound pipeline of a pipeline unit, else the resolved source."""
        if isinstance(self.source, PipelineSource):
            return self.source.bound if self.source.bound is not None else self.source.pipeline
        return self._resolve(experiment)

    def _resolve(self, experiment: Any) -> Any:
        if self._callable is None:
            source = self.source
            if isinstance(source, tuple):
                source = getattr(experiment.instances[source[0]], source[1])
            self._callable = source
        return self._callable

    def __call__(self, experiment: Any, iteration: int, n_iters: int | None, last: bool) -> tuple[Any, float] | None:
        """Run at ``iteration`` if ``when`` says so; the output and its time, else ``None``."""
        if not must_execute(iteration, self.when, n_iters, last):
            return None
        args = eval_expr(self.args, experiment=experiment)
        kwargs = eval_expr(self.kwargs, experiment=experiment)
        start = time.perf_counter()
        if isinstance(self.source, PipelineSource):
            if self._iterator is None or self.source.mode == 'func':
                self._iterator = self.source(*args, experiment=experiment, **kwargs)
            self.output = self._iterator if self.source.mode == 'func' else next(self._iterator)
        elif self.generator:
            if self._iterator is None:
                self._iterator = self._resolve(experiment)(*args, **kwargs)
            self.output = next(self._iterator)
        else:
            self.output = self._resolve(experiment)(*args, **kwargs)
        elapsed = time.perf_counter() - start
        self._save(experiment)
        return self.output, elapsed

    def _save(self, experiment: Any) -> None:
        if self.save_output_dict:
            pairs = list(self.output.items())
        elif self.save_to is None:
            return
        elif isinstance(self.save_to, (list, tuple)):
            values = [self.output] if isinstance(self.output, str) or not hasattr(self.output, '__len__') \
                else list(self.output)
            if len(values) != len(self.save_to):
                raise ValueError(f"Expected unit {self.name!r} to return {len(self.save_to)} values for "
                                 f"save_to={self.save_to!r}. Received {len(values)}: {self.output!r}.")
            pairs = list(zip(self.save_to, values))
        else:
            pairs = [(self.save_to, self.output)]
        for name, value in pairs:
            if isinstance(value, types.GeneratorType):
                raise TypeError(f"Expected unit {self.name!r} to return a value to save as {name!r}. Received: a "
                                "generator (the function yields), which cannot be stored. Add it with "
                                "add_generator(...) to take one item per iteration, or return list(...) of what it "
                                "yields.")
            if name is not None:
                experiment.storage.update_variable(name, value)
