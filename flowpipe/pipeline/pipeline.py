"""``Pipeline``: an immutable description of what happens to every batch.

A pipeline is a tuple of frozen action records plus a bound dataset and config. Every chained call
(``p.resize(...)``), composition (``<<``, ``+``, ``*``, ``@``) and ``run(lazy=True)`` returns a new pipeline;
no operand is ever changed. Running lives in ``flowpipe.execution``; the variables, models and the
``next_batch`` iterator live in a ``PipelineState`` that each pipeline owns (a new pipeline starts fresh).
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Callable, Iterator

from ..config import Config
from ..errors import ExpressionError
from .aliases import PipelineAliases, bar_or_notifier
from .names import any_batch_action, batch_action_names, check_action, check_dataset
from .profiling import PipelineProfile
from .records import ActionRecord, MaybeRecord
from .registry import builtin_names, get_builtin
from .sections import SectionBuilder, adder as _adder
from .state import PipelineState

__all__ = ['Pipeline']

_DEFINITION = ('_actions', '_before', '_after', '_dataset', '_config', '_run_args', '_namespaces')


class Pipeline(PipelineAliases, PipelineProfile):
    """A lazy chain of actions applied to every batch of a dataset.

    Args:
        dataset: the dataset to draw batches from, or ``None`` to bind one later (``pipeline << dataset``).
        config: a dict or ``Config`` read by ``C(...)`` expressions.

    Any batch action or built-in (``init_variable``, ``update``/``save_to``, ``call``, ``print``, ``rebatch``,
    ``join``, ``merge``, model actions) is available as a method that returns a new pipeline; so are the
    functions of namespaces added by ``add_namespace``. batchflow's method names are aliases (``PipelineAliases``).
    """
    __slots__ = (*_DEFINITION, '_state', '__weakref__')

    def __init__(self, dataset: Any = None, config: Mapping | None = None):
        if config is not None and not isinstance(config, Mapping):
            raise TypeError(f"Expected config to be a dict or Config. Received: config={config!r}")
        if dataset is not None:
            check_dataset(dataset)
        for slot, value in zip(_DEFINITION, ((), (), (), dataset, Config(config), None, ())):
            object.__setattr__(self, slot, value)
        object.__setattr__(self, '_state', PipelineState())

    def _replace(self, **changes: Any) -> Pipeline:
        """A new pipeline with some definition fields changed and a fresh state."""
        new = object.__new__(type(self))
        for slot in _DEFINITION:
            object.__setattr__(new, slot, changes.pop(slot[1:], getattr(self, slot)))
        if changes:
            raise TypeError(f"Unknown pipeline fields: {sorted(changes)!r}")
        object.__setattr__(new, '_state', PipelineState())
        return new

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"A Pipeline is immutable: cannot set {name!r}. Chained calls and composition "
                             "(<<, +, *, @) return new pipelines; use set_variable() for variables.")

    def __getstate__(self) -> dict:
        """The definition and the variables; models (threads, devices) stay behind, named in the copy's repr."""
        state = {slot: getattr(self, slot) for slot in _DEFINITION}
        # modules do not pickle: a namespace module travels as its name
        state['_namespaces'] = tuple(getattr(namespace, '__name__', namespace) if isinstance(namespace, ModuleType)
                                     else namespace for namespace in self._namespaces)
        with self._state.variables.lock:
            state['variables'] = dict(self._state.variables)
        state['models_left'] = tuple(sorted(self._state.models))
        return state

    def __setstate__(self, state: dict) -> None:
        for slot in _DEFINITION:
            object.__setattr__(self, slot, state[slot])
        object.__setattr__(self, '_state', PipelineState())
        self._state.variables.update(state.get('variables', {}))
        self._state.models_left = tuple(state.get('models_left', ()))

    # definition

    def __getattr__(self, name: str) -> Callable[..., Pipeline]:
        if name.startswith('_'):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if self._namespaces and get_builtin(name) is None and not any_batch_action(name, self._batch_class()):
            function = self._namespace_function(name)
            if function is not None:
                return lambda *args, **kwargs: self.call(function, *args, **kwargs)
        check_action(name, self._batch_class(), _PUBLIC_METHODS)
        return _adder(self, name, 'actions')

    def __dir__(self) -> list[str]:
        batch_class = self._batch_class()
        actions = batch_action_names(batch_class) if batch_class is not None else ()
        return sorted({*object.__dir__(self), *builtin_names(), *actions})

    def _batch_class(self) -> type | None:
        return getattr(self._dataset, 'batch_class', None)

    def _with_record(self, section: str, record: ActionRecord) -> Pipeline:
        return self._replace(**{section: getattr(self, '_' + section) + (record,)})

    @property
    def actions(self) -> tuple:
        """The main actions, as frozen records."""
        return self._actions

    @property
    def before(self) -> SectionBuilder:
        """Add a built-in action that runs once at the start of every run: ``p.before.init_variable(...)``."""
        return SectionBuilder(self, 'before')

    @property
    def after(self) -> SectionBuilder:
        """Add a built-in action that runs once at the end of every run: ``p.after.call(fn)``."""
        return SectionBuilder(self, 'after')

    @property
    def dataset(self) -> Any:
        """The bound dataset, or ``None``."""
        return self._dataset

    @property
    def config(self) -> Config:
        """A copy of the pipeline's config (read by ``C``); change it with ``pipeline << {...}``."""
        return self._config.copy()

    @property
    def run_args(self) -> Any:
        """The arguments stored by ``run(..., lazy=True)``, or ``None``."""
        return self._run_args

    def all_records(self) -> tuple:
        """Records of the before section, the main actions and the after section."""
        return self._before + self._actions + self._after

    # composition

    def __lshift__(self, other: Any) -> Pipeline:
        """``pipeline << dataset`` binds a dataset; ``pipeline << config`` merges a dict or ``Config``."""
        if isinstance(other, Mapping):
            return self._replace(config=self._config + Config(other))
        if isinstance(other, Pipeline) or other is None:
            raise TypeError(f"Expected a dataset or a config (dict/Config) after '<<'. Received: {other!r}. "
                            "Use '+' to concatenate pipelines.")
        check_dataset(other)
        batch_class = getattr(other, 'batch_class', None)
        for record in _flat(self._actions):
            check_action(record.name, batch_class)
        return self._replace(dataset=other)

    def __rrshift__(self, other: Any) -> Pipeline:
        """``dataset >> pipeline`` and ``config >> pipeline``: the same new pipeline as ``pipeline << other``."""
        if isinstance(other, Pipeline) or other is None:
            raise TypeError(f"Expected a dataset or a config (dict/Config) before '>>'. Received: {other!r}. "
                            "Use '+' to concatenate pipelines.")
        return self << other

    def __add__(self, other: Pipeline) -> Pipeline:
        """Concatenate: the actions (and sections) of ``self``, then those of ``other``."""
        if not isinstance(other, Pipeline):
            return NotImplemented
        combined = self._replace(actions=self._actions + other._actions, before=self._before + other._before,
                                 after=self._after + other._after, config=self._config + other._config)
        dataset = self._dataset if self._dataset is not None else other._dataset
        return combined if dataset is None else combined << dataset

    def __mul__(self, times: int) -> Pipeline:
        """Repeat the main actions ``times`` times for every batch."""
        if isinstance(times, bool) or not isinstance(times, numbers.Integral):
            return NotImplemented
        if times < 1:
            raise ValueError(f"Expected a positive number of repetitions. Received: times={times!r}")
        return self._replace(actions=self._actions * int(times))

    __rmul__ = __mul__

    def __matmul__(self, prob: float) -> Pipeline:
        """Apply the main actions to each batch with probability ``prob`` (drawn from the batch's generator)."""
        if isinstance(prob, bool) or not isinstance(prob, numbers.Real):
            return NotImplemented
        if not 0 <= prob <= 1:
            raise ValueError(f"Expected a probability in [0, 1] after '@'. Received: prob={prob!r}")
        return self._replace(actions=(MaybeRecord(self._actions, float(prob)),))

    # state

    @property
    def state(self) -> PipelineState:
        """The runtime state: variables, models, the ``next_batch`` iterator."""
        return self._state

    def _ready_variables(self) -> Any:
        from ..expr.context import Context
        context = Context(dataset=self._dataset, config=self._config, variables=self._state.variables,
                          models=self._state.models, pipeline=self)
        self._state.declare_variables(self.all_records(), context)
        return self._state.variables

    def v(self, name: str) -> Any:
        """The value of the variable ``name``."""
        variables = self._ready_variables()
        if name not in variables:
            raise ExpressionError(f"Pipeline has no variable {name!r}. Variables: {sorted(variables)!r}. "
                                  f"Declare it with .init_variable({name!r}, default) or set_variable().")
        return variables[name]

    get_variable = v

    def set_variable(self, name: str, value: Any) -> None:
        """Set the variable ``name`` (in this pipeline's state, not in its definition)."""
        variables = self._ready_variables()
        with variables.lock:
            variables[name] = value

    @property
    def variables(self) -> Any:
        """All variables, a ``Store``."""
        return self._ready_variables()

    def m(self, name: str) -> Any:
        """The model ``name`` (created by ``init_model`` or ``import_model``).

        Before the first batch, a model that ``init_model`` declares is its ``PendingModel`` placeholder (or the
        static model): ``pipeline.m(name).device_plan(64)`` shows where it will run.
        """
        models = self._state.models
        if name not in models:
            from ..expr.context import Context
            from .model_actions import declared_model
            context = Context(dataset=self._dataset, config=self._config, variables=self._state.variables,
                              models=models, pipeline=self)
            declared = declared_model(_flat(self.all_records()), name, context)
            if declared is not None:
                return declared
            raise ExpressionError(f"Pipeline has no model {name!r}. Models: {sorted(models)!r}. Models are "
                                  "created on the first batch by init_model; run or next_batch first.")
        return models[name]

    def plot(self, *names: str, window: int | None = None, ax: Any = None, logy: bool = False,
             path: Any = None) -> Any:
        """Plot the histories held by the variables ``names`` (lists of numbers) with matplotlib; returns the axes.

        ``window`` adds a moving mean of that many values; ``ax`` draws on given axes; ``logy`` a log y axis;
        ``path`` saves the figure to a file (in a script, where matplotlib shows nothing: a warning says so).
        matplotlib is optional: ``pip install 'flowpipe[notebooks]'``.
        """
        if not names:
            raise TypeError(f"Expected the names of variables to plot, e.g. plot('loss_history'). Received: none; "
                            f"the variables are {sorted(self._ready_variables())!r}.")
        from ..progress.plots import plot_histories
        return plot_histories({name: self.v(name) for name in names}, window=window, ax=ax, logy=logy, path=path,
                              caller='Pipeline.plot')

    @property
    def models(self) -> Any:
        """All models, a ``Store``."""
        return self._state.models

    def reset(self, *targets: Any) -> Pipeline:
        """Reset ``'iter'``, ``'variables'`` (``'vars'``), ``'models'`` or ``'all'`` (several may be given, or a list);
        returns ``self``. ``reset(True)`` is ``reset('iter')``, ``reset(None)`` and ``reset(False)`` do nothing."""
        if len(targets) == 1 and isinstance(targets[0], (list, tuple)):
            targets = tuple(targets[0])
        if targets in ((None,), (False,)):
            return self
        self._state.reset(*('iter' if target is True else target for target in (targets or ('iter',))))
        return self

    # execution (``flowpipe.execution`` depends on this module, so it is imported when a run starts)

    def run(self, batch_size: int | None = None, shuffle: bool | int | None = None, n_epochs: int | None = None,
            n_iters: int | None = None, drop_last: bool | None = None, bar: Any = None,
            prefetch: int | None = None, lazy: bool = False, seed: int | None = None,
            profile: bool | None = None, reset: Any = None, target: str | None = None, notifier: Any = None,
            checkpoint: Any = None, resume: Any = None, callbacks: Any = None, workers: int | None = None,
            deterministic: bool | str | None = None, whole_epochs: bool | None = None, summary: bool | None = None,
            **kwargs: Any) -> Pipeline:
        """Process every batch; returns the pipeline (a new one holding the arguments when ``lazy=True``).

        Arguments left as ``None`` come from an earlier ``run(..., lazy=True)``, else from the defaults: one epoch,
        no shuffling, ``drop_last=False``, ``whole_epochs=False``, no bar, no prefetch, fresh random seed, no
        profiling. With ``prefetch > 0``, ``target='processes'`` processes the batches in worker processes instead
        of threads (their changes to variables and models do not come back; see docs/pipelines.md); ``workers`` is
        the number of worker threads or processes (default: ``prefetch``). ``notifier`` is batchflow's name for
        ``bar``. ``checkpoint`` (a folder, or ``Checkpoint(path, every=, seconds=, keep=)``) writes checkpoints as
        batches complete; ``resume=True`` (or a checkpoint's path) continues after the latest one (see
        docs/pipelines.md#checkpoints). ``callbacks`` (``flowpipe.callbacks`` objects: validation, early stopping,
        best checkpoints, loggers) hear of run start, batch ends, epoch ends and run end (see docs/training.md);
        with callbacks, rank 0 prints one line of each epoch's logged values unless ``summary=False``.
        ``deterministic=True`` (or ``'warn'``) turns on torch's deterministic algorithms for the run, so that GPU
        steps repeat bit for bit too (see docs/training.md#deterministic-gpu-runs). ``whole_epochs=True`` ends every
        epoch with its own batch, short when the batch size does not divide the dataset, as
        ``DataLoader(drop_last=False)`` and Keras do; by default (batchflow's batches) a batch may take the tail of
        one epoch and the head of the next (see docs/pipelines.md#epochs). Extra keyword arguments go to the index's
        ``gen_batch``.
        """
        from ..execution.run import RunArgs, run_pipeline
        bar = bar_or_notifier(bar, notifier)
        args = RunArgs.merge(self._run_args, extra=kwargs, **RunArgs.options(locals()))
        if lazy:
            return self._replace(run_args=args)
        return run_pipeline(self, args, reset)

    def gen_batch(self, batch_size: int | None = None, shuffle: bool | int | None = None,
                  n_epochs: int | None = None, n_iters: int | None = None, drop_last: bool | None = None,
                  bar: Any = None, prefetch: int | None = None, seed: int | None = None,
                  profile: bool | None = None, reset: Any = None, target: str | None = None,
                  notifier: Any = None, checkpoint: Any = None, resume: Any = None, callbacks: Any = None,
                  workers: int | None = None, deterministic: bool | str | None = None,
                  whole_epochs: bool | None = None, summary: bool | None = None, **kwargs: Any) -> Iterator[Any]:
        """Yield processed batches; the arguments are those of ``run`` (``deterministic``: torch's switches stay on
        until the loop ends).

        With ``checkpoint``, the checkpoint of a batch is written when the loop asks for the next one (or leaves),
        so it holds what the loop's body did to the pipeline's variables and models; so are the callbacks called.
        """
        from ..execution.run import RunArgs, iterate
        bar = bar_or_notifier(bar, notifier)
        args = RunArgs.merge(self._run_args, extra=kwargs, **RunArgs.options(locals()))
        return iterate(self, args, reset)

    def next_batch(self, batch_size: int | None = None, shuffle: bool | int | None = None,
                   n_epochs: int | None = None, n_iters: int | None = None, drop_last: bool | None = None,
                   prefetch: int | None = None, seed: int | None = None, reset: Any = None,
                   target: str | None = None, workers: int | None = None, whole_epochs: bool | None = None,
                   **kwargs: Any) -> Any:
        """Process and return the next batch, continuing one iterator across calls.

        The iterator is infinite unless ``n_epochs`` or ``n_iters`` is given (then ``StopIteration`` ends it);
        calling with different arguments starts a new one, and so does ``reset='iter'``. A batch that raises ends
        the iteration: later calls raise ``RuntimeError`` naming that batch until ``reset='iter'`` (raise
        ``SkipBatch`` in an action to drop a batch and go on).
        """
        from ..execution.run import RunArgs, next_batch
        options = RunArgs.options(locals())
        # shuffle=True and shuffle=1 compare equal but mean different runs, hence the types in the key.
        given = tuple((name, value, type(value)) for name, value in options.items())
        cached = self._state.next_args
        if kwargs or cached is None or cached[0] != given:
            args = RunArgs.merge(self._run_args, extra=kwargs, **options)
            self._state.next_args = None if kwargs else (given, args)
        else:
            args = cached[1]
        return next_batch(self, args, reset)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}(dataset={_short(self._dataset)}, config={_short(dict(self._config))})"]
        for title, records in (('before', self._before), ('actions', self._actions), ('after', self._after)):
            if records or title == 'actions':
                lines.append(f"  {title}:")
                lines.extend(f"    {record!r}" for record in records)
        if self._run_args is not None:
            lines.append(f"  lazy run: {self._run_args!r}")
        if self._state.models_left:
            lines.append(f"  models not carried over by pickling: {', '.join(self._state.models_left)} "
                         "(save them with save_model and load them with load_model)")
        return '\n'.join(lines)


_PUBLIC_METHODS = tuple(name for name in dir(Pipeline) if not name.startswith('_'))


def _flat(records: tuple) -> Iterator[ActionRecord]:
    for record in records:
        if isinstance(record, MaybeRecord):
            yield from _flat(record.actions)
        else:
            yield record


def _short(value: Any) -> str:
    if value is None:
        return 'None'
    text = repr(value) if isinstance(value, dict) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + '...'

