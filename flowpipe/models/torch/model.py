"""``TorchModel``: a network, its loss, optimizer and scheduler, built from one config.

Who owns what: ``config.parse_config`` reads inputs and targets, ``losses.make_loss`` the ``loss`` key,
``optimizers`` the ``optimizer`` key, ``decay`` the ``decay`` key, ``flowpipe.parallel`` the ``device``,
``microbatch``, ``device_weights``, ``device_map``, ``amp``, ``memory_format``, ``compile``, ``pin_memory``,
``sharding*`` and ``randomness`` keys
(one plan, one engine: every step is delegated to ``self.engine``), ``clipping`` the ``clip_grad_value``,
``clip_grad_norm`` and ``gradient_clipping`` keys (applied in the engine's step), ``callbacks`` the ``callbacks``
key (called here after every step), ``state`` the parts of its state (``parts``, ``state``, ``load_state``),
``io`` saving and loading, ``export`` the other file formats, ``batch_size``
the batch-size finder, ``batchflow_keys`` batchflow's ``init_weights`` and ``benchmark`` keys and the refusal of
its keys flowpipe does not read, ``averaging`` the ``weights_averaging`` (``wa``, ``swa``) key, ``checkpointing`` the
``checkpoint_activations`` key (wrapped into the network as it is built); the ``sam_rho``
and ``sam_individual_norm`` keys go to every training step (``engines.sam``).
Ready networks (``ResNet18``...) are subclasses that only say how to make their ``nn.Module``.
"""
from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Mapping
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from ...parallel import build_engine, distributed, make_plan
from ...parallel.engines.sam import make_sam
from ...plan_keys import PLAN_KEYS
from ...torchutils import to_tensor
from . import batch_size as batch_size_module, export, io
from .averaging import make_averaging
from .batchflow_keys import apply_benchmark, apply_init_weights, apply_trainable, check_batchflow_keys
from .callbacks import make_callbacks
from .checkpointing import apply_checkpointing, describe_checkpointing
from .checks import BatchNormCheck, InputCheck, LossCheck
from .clipping import read_clipping
from .config import ModelSpec, as_dtype, flat_paths, merge_nested, nest, parse_config, unknown_keys
from .decay import make_decay
from .gradcam import GradCam
from .history import History, HistoryPlots
from .inputs import (DEFAULT_INPUT, FETCHES, as_list, by_name, check_fetches, check_output, fetch_value,
                     pick_fetches, require)
from .losses import make_loss
from .optimizers import make_optimizer
from .profiling import OpProfiler, profiled as _profiled
from .state import ModelState
from .sections import has_sections, network_from_sections

__all__ = ['FETCHES', 'TorchModel', 'check_fetches']



class TorchModel(ModelState, HistoryPlots, GradCam):
    """A trainable PyTorch model configured by a dict with ``'/'`` keys (see ``docs/models.md``).

    Args:
        config: a dict, nested dict or ``flowpipe.Config``.
        **overrides: config items given as keywords (``device='cpu'``), merged over ``config``.

    Attributes:
        spec: the parsed config (inputs, targets, shapes, classes).
        engine: the ``flowpipe.parallel`` engine every step goes through.
        loss_fn: ``loss_fn(outputs, *targets)``.
        optimizer: the optimizer over ``engine.parameters()``.
        decay: the learning-rate schedules (``flowpipe.models.torch.decay.Decay``), or ``None``.
        clip_grad_value: the largest absolute entry of the full-batch gradient (or a callable ``grad -> grad``),
            or ``None``; applied before ``clip_grad_norm``.
        clip_grad_norm: the largest total 2-norm of the full-batch gradient, or ``None`` for no clipping.
        iteration: training batches seen so far.
        last_loss: the last training step's full-batch loss, a 0-dim tensor left on the device (``None``
            before one).
        callbacks: the model's own copies of the config's ``callbacks``, called after every training step.
        sam: sharpness-aware minimization from ``sam_rho`` and ``sam_individual_norm`` (``None``: off).
        averaging: the averaged network of ``weights_averaging`` (``flowpipe.models.torch.averaging``), or ``None``.
    """

    #: ``(input_shape, num_outputs, **options) -> nn.Module`` for ready networks; ``None`` needs ``config['model']``.
    network_factory: ClassVar[Callable[..., nn.Module] | None] = None
    #: config path -> keyword of ``network_factory`` (``'body/filters': 'filters'``).
    network_options: ClassVar[dict[str, str]] = {}
    #: top-level config keys a subclass reads itself (beyond ``config.TOP_KEYS``): not warned about as unknown.
    config_keys: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def default_config(cls) -> dict:
        """The class's own config (a nested dict, batchflow's ``default_config``): the user's config is merged
        over it, section by section. ``TorchModel``'s is empty; the zoo's classes give their networks' sections."""
        return {}

    def __init__(self, config: Mapping | None = None, **overrides: Any):
        self.config = merge_nested(nest(type(self).default_config()), nest(config))
        if overrides:
            self.config = nest({**flat_paths(self.config), **overrides})
        self.spec: ModelSpec = parse_config(self.config)
        self._warn_unknown_keys()
        self.output_names = check_output(self.spec.get('output'))    # batchflow's 'output': fetchable by name
        self.engine = self.loss_fn = self.optimizer = self.decay = self.averaging = None
        self.checkpointed: tuple[str, ...] | None = None        # the modules checkpointed, once built
        self.sam = make_sam(self.spec.get('sam_rho'), self.spec.get('sam_individual_norm', True))
        self.clip_grad_value, self.clip_grad_norm = read_clipping(self.spec)
        self._loss_check = LossCheck(self.spec.get('nonfinite_loss'))
        self._input_check = InputCheck(self.spec.shapes, self.spec.classes)   # as declared, not as inferred
        self._batch_norm_check: BatchNormCheck | None = None
        # the job's world from its environment: a model made under torchrun plans for it before the group starts
        self._plan = self._make_plan(world=distributed.current())
        self.callbacks = make_callbacks(self.spec.get('callbacks'), self)
        self.iteration = 0
        self.last_loss: torch.Tensor | None = None
        self.history = History()        # loss_list, lr_list, plot_loss, plot_lr
        self._last_batch_size: int | None = None
        # Steps from concurrent threads (a prefetching run without use_lock) must not interleave gradients.
        self._step_lock = threading.Lock()
        self.profiler = OpProfiler() if self.spec.get('profile') else None
        if self._shape_missing():
            # A ready network without the input's shape: built by the first step, from the inputs it gets, with
            # the weights the torch generator would give now (so the seed that governs this call still does).
            self._pending_rng = torch.random.get_rng_state()
        else:
            self._build()

    # building

    def _warn_unknown_keys(self) -> None:
        check_batchflow_keys(self.spec.config, type(self).network_options, type(self).config_keys)
        apply_benchmark(self.spec.get('benchmark'))
        unknown = unknown_keys(self.spec, type(self).config_keys)
        if unknown:
            reasons = '; '.join(f'{key!r}: {why}' for key, why in unknown.items())
            warnings.warn(f"Expected model config keys that {type(self).__name__} reads. Received: {reasons}. "
                          "These keys are ignored. A model class that reads its own keys lists them in its "
                          "config_keys.", UserWarning, stacklevel=3)

    def _shape_missing(self) -> bool:
        name = self._first_input()
        builds = type(self).network_factory is not None or has_sections(self.spec)
        return self.spec.get('model') is None and builds and name not in self.spec.shapes

    def _build(self) -> None:
        network = self._make_network()
        world = distributed.setup()
        if world != self._plan.world:          # the group started since: the plan takes its backend
            self._plan = self._make_plan(world=world)
        self.engine = build_engine(network, self._plan)
        self.engine.skip_nonfinite = self._loss_check.skips
        self._batch_norm_check = BatchNormCheck(self.engine.module, self.engine.plan)
        self.loss_fn = make_loss(self.spec.get('loss'), has_classes=bool(self.spec.classes))
        self.optimizer = make_optimizer(self.spec.get('optimizer'), self.engine.parameters())
        self.decay = make_decay(self.spec.get('decay'), self.optimizer)
        self.averaging = make_averaging(self.spec.config, self.engine, self.optimizer)

    def _make_plan(self, world: Any = None) -> Any:
        return make_plan(**{key: self.spec.get(key) for key in PLAN_KEYS},
                         pin_memory=self.spec.get('pin_memory', 'auto'), world=world)

    def _first_input(self) -> str:
        return self.spec.input_names[0] if self.spec.input_names else DEFAULT_INPUT

    def _build_for(self, inputs: list[torch.Tensor]) -> None:
        """Build a network deferred for want of a shape: ``inputs/<first input>/shape`` is the first input's."""
        name = self._first_input()
        self.config.setdefault('inputs', {}).setdefault(name, {})['shape'] = tuple(inputs[0].shape[1:])
        self.spec = parse_config(self.config)
        with torch.random.fork_rng(devices=[]):
            torch.random.set_rng_state(self._pending_rng)
            self._build()
        del self._pending_rng

    def _built(self) -> Any:
        if self.engine is None:
            raise ValueError(f"Expected a built model. Received: a {type(self).__name__} that builds its network at "
                             "the first train or predict step, from the inputs' shape (no 'inputs/<name>/shape' in "
                             "its config). Run a step first, or give the shape.")
        return self.engine

    def _make_network(self) -> nn.Module:
        ready = self.spec.get('model')
        if ready is not None:
            network = ready if isinstance(ready, nn.Module) else ready() if callable(ready) else ready
            if not isinstance(network, nn.Module):
                raise TypeError(f"Expected config 'model' as an nn.Module or a callable that makes one. "
                                f"Received: {type(network).__name__} {network!r}.")
        else:
            network = self.build_network(self.spec)
        apply_init_weights(network, self.spec.get('init_weights'))
        apply_trainable(network, self.spec.get('trainable'))
        dtype = self.spec.get('dtype')
        if dtype is not None:
            network = network.to(as_dtype(dtype))
        self.checkpointed = apply_checkpointing(network, self.spec.get('checkpoint_activations'),
                                                self.spec.get('compile'))
        return network

    def build_network(self, spec: ModelSpec) -> nn.Module:
        """Make the ``nn.Module`` from the parsed config: the network of its sections (``initial_block``,
        ``body``, ``head``... see ``sections``), or a ready network's (``network_factory``) with the parts its
        sections replace."""
        factory = type(self).network_factory
        if factory is None and not has_sections(spec):
            raise ValueError(f"Expected a network: {type(self).__name__} builds none by itself. Received: no "
                             "'model' and no network sections in the config. Pass 'model': an nn.Module, "
                             "sections such as 'body': {'layout': 'cna', 'channels': 16}, or use a ready network "
                             "class such as ResNet18 or UNet.")
        return network_from_sections(spec, factory, self.network_options)

    @property
    def skipped_steps(self) -> int:
        """Training batches whose optimizer step was skipped for a non-finite loss (``nonfinite_loss='skip'``)."""
        return self._loss_check.skipped

    @property
    def model(self) -> nn.Module:
        """The primary ``nn.Module`` (the replica that holds the optimizer's parameters)."""
        return self._built().module

    @property
    def plan(self) -> Any:
        """The frozen ``DevicePlan``, known before the network is built (the engine's once it is)."""
        return self._plan if self.engine is None else self.engine.plan

    def device_plan(self, batch_size: int | None = None) -> str:
        """Readable placement: devices, shard sizes and micro-batch chunks for ``batch_size``, and the memory the
        replicas cost on a device that holds several.

        Available before the network is built (then without sizes and the parts of a ``device_map='auto'``).
        """
        checkpointing = describe_checkpointing(self.checkpointed, self.spec.get('checkpoint_activations'))
        if self.engine is None:
            return '\n'.join([self._plan.describe(batch_size), *checkpointing,
                              '  network not built yet: it is built at the first step'])
        return '\n'.join([self.engine.describe(batch_size, loss=self.loss_fn), *checkpointing])

    # steps

    def train(self, *args: Any, fetches: Any = None, inputs: Any = None, targets: Any = None,
              outputs: Any = None, seed: int | None = None, sam_rho: float | None = None,
              sam_individual_norm: bool | None = None, **named_inputs: Any) -> Any:
        """One optimizer step on a batch.

        Args:
            *args: network inputs then targets, in config order.
            fetches: ``'loss'``, ``'predictions'``, an output operation of ``OUTPUTS`` (``'proba'``, ``'labels'``,
                ``'sigmoid'``, ...), a list of them, or ``None``.
            inputs: network input(s), instead of naming them.
            targets: target(s), instead of naming them.
            outputs: batchflow's name for ``fetches``.
            seed: the step seed the random streams of the step's pieces (dropout masks) derive from; ``None``
                draws one from torch's global generator (``train_model`` in a seeded run passes one).
            sam_rho, sam_individual_norm: SAM for this step instead of the config's (``sam_rho=0``: off).
            **named_inputs: inputs and targets by their config names (``images=..., labels=...``).

        Returns:
            The fetched values (numpy arrays, the loss as a float), in the order asked; ``None`` without fetches.
        """
        fetches = pick_fetches(fetches, outputs)
        names = check_fetches(fetches)
        net_inputs, net_targets = self._collect(args, inputs, targets, named_inputs, need_targets=True)
        wants_outputs = any(name != 'loss' for name in names)
        sam = self.sam if sam_rho is None and sam_individual_norm is None else make_sam(
            self.spec.get('sam_rho') if sam_rho is None else sam_rho,
            self.spec.get('sam_individual_norm', True) if sam_individual_norm is None else sam_individual_norm)
        with self._step_lock, _profiled(self.profiler, self.iteration):
            if self.engine is None:
                self._build_for(net_inputs)
            self._input_check(self._named(net_inputs, net_targets), self.loss_fn)
            batch_size = int(net_inputs[0].shape[0])
            self._batch_norm_check(batch_size)      # before the step: a 1-item piece fails inside it
            if self.decay is not None:
                self.decay.before_batch()
            try:
                result = self.engine.train_step(net_inputs, net_targets, self.loss_fn, self.optimizer,
                                                return_outputs=wants_outputs, clip_grad_norm=self.clip_grad_norm,
                                                clip_grad_value=self.clip_grad_value, seed=seed, sam=sam)
            except ValueError as error:
                self._batch_norm_check.explain(error, batch_size)
                raise
            self._loss_check(result, self.iteration + 1)
            self.iteration += 1
            self._last_batch_size, self.last_loss = batch_size, result.loss
            self.history.record(result.loss, self.optimizer)       # the rates this step was taken with
            loss = functools.cache(lambda: float(result.loss))     # read from the device once, if at all
            if self.decay is not None:
                self.decay.after_batch(self.iteration, self._plan_batch_size(), loss)
            if self.averaging is not None:
                self.averaging.after_batch(self.iteration)
            if self.callbacks:
                self._call_callbacks(loss(), net_inputs, net_targets)
        return self._fetch(fetches, names, loss, result.outputs)

    def _call_callbacks(self, loss: float, inputs: list[torch.Tensor], targets: list[torch.Tensor]) -> None:
        # Under the step lock, in step order: a learning rate set here is the next step's, and EarlyStopping's
        # StopPipeline comes before any later batch's step. One logs dict for all: what one sets, the next sees.
        logs = {'loss': loss, 'lr': float(self.optimizer.param_groups[0]['lr']), 'iteration': self.iteration,
                'batch_size': self._last_batch_size, 'inputs_shapes': [tuple(t.shape) for t in inputs],
                'targets_shapes': [tuple(t.shape) for t in targets]}
        for callback in self.callbacks:
            callback.on_train_step_end(self, logs)

    def predict(self, *args: Any, fetches: Any = None, inputs: Any = None, targets: Any = None,
                outputs: Any = None, use_averaged: bool = False, **named_inputs: Any) -> Any:
        """Outputs for a batch in evaluation mode, without gradients; arguments as in ``train``.

        ``fetches`` (or ``outputs``) is ``'predictions'`` by default; targets are needed only to fetch ``'loss'``.
        ``use_averaged=True`` predicts with the averaged network of ``weights_averaging``.
        """
        fetches = pick_fetches(fetches, outputs, 'predictions')
        names = check_fetches(fetches)
        net_inputs, net_targets = self._collect(args, inputs, targets, named_inputs, need_targets='loss' in names)
        with self._step_lock:
            if self.engine is None:
                self._build_for(net_inputs)
            self._input_check(self._named(net_inputs, net_targets), self.loss_fn)
            outputs = self._averaged().predict(net_inputs) if use_averaged else self.engine.predict(net_inputs)

        def loss() -> float:
            """The batch's loss; in a distributed run the global batch's, whose shards the ranks hold."""
            moved = [target.to(outputs.device) for target in net_targets]
            moved = [t.to(outputs.dtype) if t.is_floating_point() else t for t in moved]
            return self.engine.predicted_loss(self.loss_fn, outputs, moved)
        return self._fetch(fetches, names, loss, outputs)

    def _averaged(self) -> Any:
        if self.averaging is None:
            raise ValueError(f"Expected a model with 'weights_averaging' in its config for use_averaged=True. "
                             f"Received: a {type(self).__name__} without it. Add e.g. 'weights_averaging': "
                             "{'start_iter': 10, 'last_iter': 100, 'frequency': 5}, or predict without use_averaged.")
        return self.averaging

    # inputs and outputs

    def _collect(self, args: tuple, inputs: Any, targets: Any, named: dict,
                 need_targets: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Network input tensors and target tensors, from any of the accepted forms."""
        input_names = self.spec.input_names or (DEFAULT_INPUT,)
        declared = self.spec.input_names or (input_names if self.spec.target_names else ())
        values = by_name(args, named, declared, self.spec.target_names)
        if inputs is not None:
            values.update(zip(input_names, as_list(inputs)))
        target_names = self.spec.target_names
        if targets is not None:
            target_names = target_names or tuple(f'target{i}' for i in range(len(as_list(targets))))
            values.update(zip(target_names, as_list(targets)))
        elif not target_names:
            target_names = tuple(name for name in values if name not in input_names)
        require(input_names, values, 'the network inputs', 'inputs=')
        if need_targets:
            require(target_names, values, 'the targets for training or a loss', 'targets=')
        return ([to_tensor(values[name], name) for name in input_names],
                [self._target(values[name], name) for name in target_names if name in values])

    def _named(self, inputs: list[torch.Tensor], targets: list[torch.Tensor]) -> dict:
        """``{config name: tensor}`` of a step's tensors for ``InputCheck``; the targets only when all of them came
        (a prediction may come without some, and then their names are not known for sure)."""
        named = dict(zip(self.spec.input_names or (DEFAULT_INPUT,), inputs))
        if len(targets) == len(self.spec.target_names):
            named.update(zip(self.spec.target_names, targets))
        return named

    def _target(self, value: Any, name: str) -> torch.Tensor:
        tensor = to_tensor(value, name)
        if name in self.spec.classes and not tensor.is_floating_point() and tensor.dtype != torch.int64:
            tensor = tensor.long()  # class losses index with int64; int32/uint8 labels stay integer, widened
        return tensor

    def _fetch(self, fetches: Any, names: list[str], loss: Callable[[], float], outputs: Any) -> Any:
        if fetches is None:
            return None
        values = [fetch_value(name, loss, outputs) for name in names]
        if isinstance(fetches, str):
            return values[0]
        return type(fetches)(values) if isinstance(fetches, (list, tuple)) else values

    def close(self) -> None:
        """Stop the engine's replica worker threads; the model cannot train or predict afterwards."""
        if self.engine is not None:
            self.engine.close()

    def __enter__(self) -> 'TorchModel':
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # save / load

    def save(self, path: str, fmt: str | None = None, *, batch_size: int | None = None,
             opset_version: int | None = None, pickle_metadata: bool = True, pickle_module: Any = None,
             ignore_attributes: Any = None, **kwargs: Any) -> None:
        """Write the model to ``path``: flowpipe's own file (``fmt=None``: network, optimizer, scheduler, config,
        atomically, with dill or batchflow's ``pickle_module=pickle``) or, as batchflow's ``save(fmt=...)``,
        ``'onnx'``, ``'safetensors'``, ``'torchscript'`` or ``'export'`` (``flowpipe.models.torch.export``:
        ``batch_size`` fixes the exported batch size, ``opset_version`` the ONNX opset, ``pickle_metadata`` adds the
        metadata file, ``kwargs`` go to the exporter).

        In a distributed job every rank calls it and rank 0 writes, after every rank has arrived (replicas hold
        the same weights; a sharded engine's ranks first gather the whole state on rank 0), and every rank returns
        once the file is there: a ``load`` right after it finds the file on every rank.
        """
        engine = self._built()
        export.check_save_options(fmt, pickle_module, ignore_attributes, pickle_metadata, batch_size,
                                  opset_version, kwargs)
        if fmt is not None and engine.collective_state:
            export.refuse_sharded(self)         # on every rank, before any rank waits for the others
        distributed.barrier()
        if engine.collective_state:
            contents = io.payload(self)         # every rank takes part in gathering; rank 0 receives the state
            if distributed.is_main():
                io.write(contents, path, pickle_module)
        elif distributed.is_main():
            if fmt is None:
                io.save(self, path, pickle_module)
            else:
                export.export_file(self, path, fmt, batch_size=batch_size, opset_version=opset_version,
                                   pickle_metadata=pickle_metadata, pickle_module=pickle_module, **kwargs)
        distributed.barrier()

    def load(self, path: str, fmt: str | None = None, *, trusted: bool = False,
             pickle_module: Any = None) -> 'TorchModel':
        """Load a file's state into this model, keeping its own placement: a file of ``save`` (weights, optimizer
        and the rest), or the weights of a safetensors, TorchScript or ``torch.export`` file (or of an export's
        metadata file); ``fmt`` names the format where the extension does not (batchflow's ``'pt'``: a file of
        ``save``). A file of ``save`` is read safely (``flowpipe.safe_pickle``); one that names other code needs
        ``trusted=True``, which runs it. ``pickle_module``, batchflow's, may be dill or pickle (the safe reader reads
        both)."""
        export.check_pickle_module(pickle_module)
        export.load(self, path, fmt, trusted=trusted)
        return self

    @classmethod
    def from_file(cls, path: str, fmt: str | None = None, *, trusted: bool = False,
                  **overrides: Any) -> 'TorchModel':
        """A new model from a file of ``save`` (or an export's metadata file, or a bare TorchScript or ``.pt2``
        file); ``overrides`` change config items such as ``device`` or ``microbatch``. Read safely: a file whose
        network or config names code other than torch's and flowpipe's needs ``trusted=True``, which runs it."""
        return export.from_file(path, None if cls is TorchModel else cls, fmt, trusted=trusted, **overrides)

    # batchflow's batch-size finder, with its signatures (the model is the first argument)
    compute_optimal_batch_size = batch_size_module.compute_optimal_batch_size
    get_memory_utilization = batch_size_module.get_memory_utilization

    def __reduce__(self) -> tuple:
        """Pickle (and dill, and copy) through the contents of a model file: a built model travels as ``save``
        would write it and is made again as ``from_file`` makes it (its own placement, new worker threads); a
        model whose network is not built yet travels as its class, config and the weights' random state."""
        if self.engine is None:
            return io.restore_pending, (type(self), self.config, self._pending_rng)
        return io.restore, (io.payload(self),)

    def _plan_batch_size(self) -> int | None:
        """The batch size the repr describes: the last global batch in a distributed job, else the last batch."""
        return getattr(self.engine, 'global_size', None) or self._last_batch_size

    def info(self) -> str:
        """A printable summary: the repr (network, inputs, loss, optimizer, placement) and the config read."""
        from ...config import Config
        config = Config({key: value for key, value in self.spec.config.items() if key != 'model'}).flatten()
        lines = [repr(self), '  config:'] + [f'    {key}: {value!r}' for key, value in config.items()]
        return '\n'.join(lines)

    def show_profile_info(self, per_iter: bool = False, limit: int | None = 10) -> Any:
        """Time per torch operation of the profiled steps (config ``'profile': True``), slowest first: a
        ``pandas.DataFrame`` (see ``flowpipe.models.torch.profiling``)."""
        if self.profiler is None:
            raise ValueError("Expected a model made with 'profile': True in its config. Received: no profiling; "
                             "add 'profile': True to the model config")
        return self.profiler.table(per_iter=per_iter, limit=limit)

    def __repr__(self) -> str:
        if self.engine is None:
            return '\n'.join([f'{type(self).__name__}(network built at the first step from its inputs\' shape, '
                              f'targets: {", ".join(self.spec.target_names) or "?"})',
                              *('  ' + line for line in self._plan.describe().splitlines())])
        inputs = ', '.join(f'{name} {self.spec.shapes.get(name, "")}'.strip() for name in self.spec.input_names)
        targets = ', '.join(f'{name} ({self.spec.classes[name]} classes)' if name in self.spec.classes else name
                            for name in self.spec.target_names)
        parameters = sum(p.numel() for p in self.model.parameters())
        clips = (('clip_grad_value', self.clip_grad_value), ('clip_grad_norm', self.clip_grad_norm),
                 ('sam', self.sam), ('averaging', self.averaging))
        clip = ''.join(f'{key}={value}, ' for key, value in clips if value is not None)
        lines = [f'{type(self).__name__}(network={type(self.model).__name__}, {parameters:,} parameters, '
                 f'inputs: {inputs or "?"} -> targets: {targets or "?"})',
                 f'  loss={_short(self.loss_fn)}, optimizer={type(self.optimizer).__name__}'
                 f'(lr={self.optimizer.param_groups[0].get("lr")}), decay={self.decay}, '
                 f'{clip}trained on {self.iteration} batch{"" if self.iteration == 1 else "es"}',
                 *('  ' + line for line in self.device_plan(self._plan_batch_size()).splitlines())]
        return '\n'.join(lines)


def _short(loss_fn: Any) -> str:
    text = repr(loss_fn)
    return text if len(text) < 60 else type(loss_fn).__name__
