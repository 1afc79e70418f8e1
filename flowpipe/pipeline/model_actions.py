"""Model actions: ``init_model``, ``import_model``, ``train_model``, ``predict_model``, ``save_model``,
``load_model``.

Models live in the pipeline's ``ctx.models`` store. A *dynamic* model is built from the first batch that reaches
a model action (``train_model``, ``predict_model``...), with its config evaluated against that batch, so
``B.image_shape`` sees the images after the actions before it (``resize``, ``to_array``). A *static* model is
built once, when ``init_model`` is declared; every pipeline derived from that chain (``<< dataset``,
``<< config``, ``+``) shares that one model object. ``flowpipe.models`` is imported on first use only, so
importing pipelines does not import torch.
"""
from __future__ import annotations

import os
import sys
import warnings
import weakref
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..data.shards import shard_of, stepping
from ..errors import ExpressionError
from ..plan_keys import PLACEMENT_KEYS
from ..expr import assign, contains_expressions, evaluate
from ..expr.context import Context
from .loaded_models import forget_load, is_loaded, load_records, loaded_files, mark_loaded
from .registry import builtin
from .run_seeds import model_seed, step_seed, warn_instance

__all__ = ['PLACEMENT_KEYS', 'PendingModel', 'declared_model', 'import_model', 'init_model', 'load_model',
           'loaded_files', 'mark_loaded', 'model_seed', 'network_class_as_model', 'predict_model', 'save_model',
           'step_seed', 'train_model']

MODES = ('dynamic', 'static')




class PendingModel:
    """A dynamic model declared by ``init_model`` and not built yet (it is built by the first model action).

    ``device_plan(batch_size)`` shows where it will run before any batch, when its placement keys do not depend on
    the batch (``C('device')`` is read from the pipeline config).

    Attributes:
        name, model_class, config: as declared.
        context: what named expressions in the placement keys are evaluated against (no batch), or ``None``.
    """

    def __init__(self, name: str, model_class: Any, config: Any, context: Context | None = None):
        self.name, self.model_class, self.config, self.context = name, model_class, config, context

    def placement(self) -> dict:
        """The config's ``PLACEMENT_KEYS`` (``device``, ``microbatch``...), evaluated."""
        from ..config import Config
        context = self.context if self.context is not None else Context()
        try:
            config = evaluate(self.config, context) if not isinstance(self.config, Mapping) else self.config
            flat = Config(config or {})
            values = {key: flat.get(key) for key in PLACEMENT_KEYS}
            if values['microbatch'] is None:
                values['microbatch'] = flat.get('microbatch_size')
            return {key: evaluate(value, context) if contains_expressions(value) else value
                    for key, value in values.items()}
        except ExpressionError as error:
            raise ValueError(f"Expected placement keys ({', '.join(PLACEMENT_KEYS)}) that can be read before the "
                             f"first batch to show the plan of {self.name!r}. Received: {error}") from None

    def device_plan(self, batch_size: int | None = None) -> str:
        """Where the model will run and how a batch of ``batch_size`` will be cut, before it is built."""
        from ..parallel import make_plan
        values = self.placement()
        values['amp'] = values['amp'] or False
        values['pin_memory'] = 'auto' if values['pin_memory'] is None else values['pin_memory']
        plan = make_plan(**values)
        return plan.describe(batch_size) + '\n  model not built yet: built by the first batch that reaches a model action'

    def build(self, ctx: Context) -> Any:
        """The model, with its config evaluated against ``ctx`` (the current batch, dataset and config).

        In a run given a seed, the initial weights come from it (see ``model_seed``), drawn from a forked torch
        generator so that the user's global torch generator is left as it was; in a run that drew its own seed,
        from torch's global generator, so ``torch.manual_seed`` decides as in plain PyTorch.
        """
        shard = shard_of(ctx.batch)
        if shard is not None and shard.stepped is not None:     # a sharded run: every rank builds on one batch
            from ..parallel.run_end import exchange_position
            exchange_position(shard.batch, f'the build of model {self.name!r}')
        config = self._evaluated_config(ctx)
        model_class = evaluate(self.model_class, ctx) if contains_expressions(self.model_class) else self.model_class
        if model_class is None:
            model_class = _default_class()
        model_class, config = network_class_as_model(model_class, config)
        if not callable(model_class):
            raise TypeError(f"Expected {self.model_class!r} to give a model class such as ResNet18. Received: "
                            f"{model_class!r}.")
        root = getattr(ctx.seed, 'entropy', None)
        if root is None or not getattr(ctx.seed, 'given', True):
            return model_class(config)
        import torch
        warn_instance(self.name, config)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(model_seed(root, self.name))
            return model_class(config)

    def _evaluated_config(self, ctx: Context) -> Any:
        """The config evaluated against ``ctx``; in a distributed run, rank 0's (whose shard is never empty), so that
        every rank builds the same model even where a rank's shard is empty (``B.image_shape`` of no images)."""
        if not contains_expressions(self.config):
            return self.config
        if shard_of(ctx.batch) is None:
            return evaluate(self.config, ctx)
        from ..parallel.distributed import from_rank_0
        return from_rank_0(lambda: evaluate(self.config, ctx))

    def __repr__(self) -> str:
        return (f"PendingModel({self.name!r}, {getattr(self.model_class, '__name__', self.model_class)}: "
                "built by the first batch that reaches a model action; device_plan(batch_size) shows its placement)")


def declared_model(records: Any, name: str, context: Context) -> Any:
    """What ``init_model(name, ...)`` among ``records`` will register: a static model, a ``PendingModel`` (with
    ``context`` for its plan), or ``None`` when no ``init_model`` declares ``name``."""
    for record in records:
        if getattr(record, 'name', None) == 'init_model' and record.kwargs.get('name') == name:
            static = record.kwargs['static']
            if static is not None:
                return static.model
            return PendingModel(name, record.kwargs['model_class'], record.kwargs['config'], context)
    return None


class StaticModel:
    """Holds a model built at declaration; a short repr keeps action labels readable."""

    def __init__(self, model: Any):
        self.model = model

    def __repr__(self) -> str:
        return f'<static {type(self.model).__name__}>'


def _default_class() -> type:
    from ..models.torch import TorchModel
    return TorchModel


def network_class_as_model(model_class: Any, config: Any) -> tuple[Any, Any]:
    """A plain ``nn.Module`` class given as the model class (``init_model('net', Net, ...)``) as ``TorchModel`` with
    ``'model': Net`` in its config (the network is made by ``Net()``); any other class as it is."""
    torch = sys.modules.get('torch')        # a module class exists only once torch is imported: no import here
    if torch is None or not isinstance(model_class, type) or not issubclass(model_class, torch.nn.Module):
        return model_class, config
    if config is not None and not isinstance(config, Mapping):
        return model_class, config          # an expression: read again once evaluated, by PendingModel.build
    if config is not None and config.get('model') is not None:
        raise ValueError(f"Expected a network given once: as the model class or as the config's 'model'. "
                         f"Received: model_class={model_class.__name__} and 'model': {config.get('model')!r}. "
                         f"Use init_model(name, TorchModel, config={{..., 'model': ...}}) or drop the config's "
                         f"'model'.")
    return _default_class(), {**(config or {}), 'model': model_class}


def _init_arguments(*args: Any, **kwargs: Any) -> dict:
    """Both orders: ``(mode, model_class, name, config=)`` and ``(name, model_class=None, mode=, config=)``."""
    if args and isinstance(args[0], str) and args[0] in MODES and len(args) >= 2 and not isinstance(args[1], str):
        def mode_first(mode, model_class, name, config=None):
            return {'name': name, 'model_class': model_class, 'mode': mode, 'config': config}
        return mode_first(*args, **kwargs)

    def name_first(name, model_class=None, mode='dynamic', config=None):
        return {'name': name, 'model_class': model_class, 'mode': mode, 'config': config}
    return name_first(*args, **kwargs)


def _declare_init(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    try:
        found = _init_arguments(*args, **kwargs)
    except TypeError as error:
        raise TypeError("Expected init_model(mode, model_class, name, config=...) or init_model(name, "
                        f"model_class=None, mode='dynamic', config=None). Received: args={args!r}, "
                        f"kwargs={kwargs!r} ({error}).") from None
    name, mode, config = found['name'], found['mode'], found['config']
    if not isinstance(name, str) or not name:
        raise TypeError(f"Expected a model name (a non-empty str) in init_model. Received: name={name!r}.")
    if mode not in MODES:
        raise ValueError(f"Expected init_model mode in {MODES}. Received: mode={mode!r}.")
    model_class = found['model_class']
    if model_class is None and mode == 'static':
        model_class = _default_class()
    if model_class is not None and not callable(model_class):
        raise TypeError(f"Expected a model class such as ResNet18 in init_model. Received: {model_class!r}.")
    if config is not None and not isinstance(config, Mapping) and not contains_expressions(config):
        raise TypeError(f"Expected the model config as a dict or Config. Received: config={config!r}.")
    model_class, config = network_class_as_model(model_class, config)
    static = None
    if mode == 'static':
        if contains_expressions(config) or contains_expressions(model_class):
            raise ValueError(f"Expected a static model class and config without named expressions: a static model is "
                             f"built when the pipeline is declared. Received: model_class={model_class!r}, "
                             f"config={config!r}. Use mode='dynamic'.")
        static = StaticModel(model_class(config))
    return (), {'name': name, 'model_class': model_class, 'mode': mode, 'config': config, 'static': static}


def _init_form(name, model_class=None, mode='dynamic', config=None):  # noqa: ANN001, ANN202 - a form to bind
    """What users pass to ``init_model`` (the mode-first order binds to it positionally as well)."""


@builtin(evaluate=False, on_declare=_declare_init, signature=_init_form)
def init_model(ctx: Context, name: str, model_class: Any, mode: str, config: Any, static: Any) -> None:
    """Register the model ``name`` in the pipeline: the static one, or a pending dynamic one."""
    if name in ctx.models:
        return
    with ctx.models.lock:
        if name not in ctx.models:
            ctx.models[name] = static.model if static is not None else PendingModel(name, model_class, config)
            forget_load(ctx.models, name)


def get_model(ctx: Context, name: str) -> Any:
    """The model ``name``; a pending dynamic model is built here, once, under the models' lock."""
    model = ctx.models.get(name)
    if model is None:
        raise ExpressionError(f"Expected a model declared by init_model, import_model or load_model. Received: "
                              f"{name!r}; the pipeline has {sorted(ctx.models)!r}. Add .init_model({name!r}, ...) "
                              "before this action.")
    if isinstance(model, PendingModel):
        with ctx.models.lock:
            model = ctx.models[name]
            if isinstance(model, PendingModel):
                model = model.build(ctx)
                ctx.models[name] = model
    return model


@builtin()
def import_model(ctx: Context, name: str, source: Any) -> None:
    """Put a model into this pipeline: a model object, or the model ``name`` of another pipeline."""
    model = source.m(name) if callable(getattr(source, 'm', None)) else source
    if isinstance(model, PendingModel):
        raise ValueError(f"Expected a built model to import as {name!r}. Received: {model!r}. Run the source "
                         "pipeline on a batch first, or use a static model.")
    if ctx.models.get(name) is not model:
        with ctx.models.lock:
            ctx.models[name] = model
            forget_load(ctx.models, name)


def _declare_step(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if not args and 'name' not in kwargs:
        raise TypeError("Expected the model name as the first argument. Received: no name. "
                        "Use e.g. train_model('net', images=B.images, labels=B.labels).")
    if 'fetches' in kwargs and 'outputs' in kwargs:
        raise ValueError(f"Expected fetches= or outputs= (the same option), not both. Received: "
                         f"fetches={kwargs['fetches']!r}, outputs={kwargs['outputs']!r}.")
    if 'outputs' in kwargs:
        kwargs = dict(kwargs)
        kwargs['fetches'] = kwargs.pop('outputs')
    fetches = kwargs.get('fetches')
    if fetches is not None and not contains_expressions(fetches):
        from ..models.torch.model import check_fetches
        check_fetches(fetches)
    return args, kwargs


def _step(ctx: Context, method: str, name: str, args: tuple, kwargs: dict, save_to: Any) -> None:
    model = get_model(ctx, name)
    if method == 'train' and 'seed' not in kwargs and isinstance(model, _default_class()):
        kwargs = {**kwargs, 'seed': step_seed(ctx, name, model.iteration)}
    if method == 'train' and getattr(model, 'decay', None) is not None:
        model.decay.epoch_items = ctx.epoch_items       # where a per-epoch schedule's epochs end
    logs = ctx.logs if method == 'train' else None
    counted = logs is not None and isinstance(model, _default_class())
    skipped = model.skipped_steps if counted else 0
    with stepping(ctx.batch):       # the distributed engine checks that every rank steps on the same global batch
        result = getattr(model, method)(*args, **kwargs)
    if counted:
        # the batch's logs, which a run's callbacks hear of (read at the batch's end); None: the step was skipped
        # for a non-finite loss
        logs.setdefault('steps', []).append(None if model.skipped_steps > skipped else model.last_loss)
    if save_to is not None:
        assign(save_to, result, ctx)


def _step_form(name, *args, fetches=None, save_to=None, **inputs):  # noqa: ANN001, ANN002, ANN003, ANN202
    """What users pass to ``train_model`` and ``predict_model``."""


@builtin(keep=('save_to',), on_declare=_declare_step, model_access='write', signature=_step_form)
def train_model(ctx: Context, name: str, *args: Any, save_to: Any = None, **kwargs: Any) -> None:
    """Train the model ``name`` on one batch: one optimizer step (``TorchModel.train``).

    Args:
        name: the model's name in the pipeline (``init_model``, ``import_model``, ``load_model``).
        *args: the inputs and targets in the order the model declares them (``B.images, B.labels``).
        fetches: what to return: ``'loss'``, ``'predictions'``, an output's name, or a list of them.
        save_to: where the fetched values go: ``V('loss', mode='a')``, ``B('predictions')``, or a list.
        **inputs: the inputs and targets by name (``images=B.images, labels=B.labels``), and the step's options
            (``lr``, ``seed``...).
        use_lock: run the step under the pipeline's lock (batchflow's option; steps are ordered anyway).
    """
    _step(ctx, 'train', name, args, kwargs, save_to)


@builtin(keep=('save_to',), on_declare=_declare_step, model_access='read', signature=_step_form)
def predict_model(ctx: Context, name: str, *args: Any, save_to: Any = None, **kwargs: Any) -> None:
    """Predict with the model ``name`` on one batch (``TorchModel.predict``; no gradients, evaluation mode).

    Args:
        name: the model's name in the pipeline.
        *args: the inputs in the order the model declares them.
        fetches: what to return (``'predictions'`` by default; an output's name, ``'loss'`` with targets given).
        save_to: where the fetched values go: ``V('predicted', mode='e')``, ``B('predictions')``.
        **inputs: the inputs (and targets, for a loss) by name.
        use_lock: run the step under the pipeline's lock.
    """
    _step(ctx, 'predict', name, args, kwargs, save_to)


@builtin(model_access='read')
def save_model(ctx: Context, name: str, path: Any) -> None:
    """Save the model ``name`` to ``path`` (atomically)."""
    get_model(ctx, name).save(path)


@builtin()
def load_model(ctx: Context, name: str, *args: Any, path: Any = None, config: Mapping | None = None,
               trusted: bool = False) -> None:
    """Load the model ``name``: ``(name, path)`` or ``(name, model_class, path)`` (or batchflow's ``(name,
    model_class, 'dynamic', path=path)``), once; read safely unless ``trusted`` (``TorchModel.from_file``).

    With a path only, an existing built model loads the weights in place (keeping its devices); otherwise a new
    model is made from the file, its class and config, with ``config`` items (``device``...) overriding them.
    Like ``init_model``, the action loads once per pipeline: later batches and runs train on the loaded model,
    until ``reset('models')`` (or ``'all'``) forgets it or ``init_model``/``import_model`` register it anew.
    """
    model_class, path = _load_arguments(args, path)
    source = os.path.abspath(os.fspath(path))
    if is_loaded(ctx.models, name, source):
        return
    with ctx.models.lock:
        if is_loaded(ctx.models, name, source):
            return
        current = ctx.models.get(name)
        if model_class is None and current is not None and not isinstance(current, PendingModel):
            current.load(path, trusted=trusted)
        else:
            from ..models.torch import io
            current = ctx.models[name] = io.load(path, model_class=model_class, trusted=trusted,
                                                 **dict(config or {}))
        load_records(ctx.models)[name] = (weakref.ref(current), source)


def _load_arguments(args: tuple, path: Any) -> tuple[Any, Any]:
    """``(model_class or None, path)`` of ``load_model``'s arguments, in flowpipe's or batchflow's form."""
    if path is None and len(args) in (1, 2):
        return (None, args[0]) if len(args) == 1 else args
    if path is not None and len(args) == 2 and args[1] != 'dynamic':
        raise ValueError(f"Expected load_model(name, model_class, 'dynamic', path=...) with a path keyword: "
                         f"flowpipe loads a model at its first batch, as batchflow's 'dynamic' mode. Received: "
                         f"mode={args[1]!r}.")
    if path is None or len(args) > 2:
        raise TypeError(f"Expected load_model(name, path), load_model(name, model_class, path) or load_model(name, "
                        f"model_class, 'dynamic', path=path). Received: {len(args) + 1} positional arguments and "
                        f"path={path!r}.")
    return (args[0] if args else None), path
