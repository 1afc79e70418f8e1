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

``TorchModel`` is assembled here from its bases, one per part: ``building.ModelBuilding`` (the network, engine,
loss and optimizer from the config, and the placement), ``steps.ModelSteps`` (``train``, ``predict``, inputs and
fetches), ``files.ModelFiles`` (``save``, ``load``, the batch-size finder) and ``state.ModelState``; this module
keeps what ties them together: the constructor, ``from_file``, pickling and the printed summaries.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Callable, ClassVar

import torch
from torch import nn

from ...parallel import distributed
from ...parallel.engines.sam import make_sam
from . import export, io
from .building import ModelBuilding
from .callbacks import make_callbacks
from .checks import BatchNormCheck, InputCheck, LossCheck
from .clipping import read_clipping
from .config import ModelSpec, flat_paths, merge_nested, nest, parse_config
from .files import ModelFiles
from .gradcam import GradCam
from .history import History, HistoryPlots
from .inputs import FETCHES, check_fetches
from .outputs import read_output
from .profiling import OpProfiler
from .state import ModelState
from .steps import ModelSteps

__all__ = ['FETCHES', 'TorchModel', 'check_fetches']


class TorchModel(ModelBuilding, ModelSteps, ModelFiles, ModelState, HistoryPlots, GradCam):
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        io.register_class(cls)         # a file names its model class; the safe reader finds it here

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
        # batchflow's 'output' names (fetchable by name), or the field of the network's return that is the prediction
        self.output_names, self.prediction_field = read_output(self.spec.get('output'))
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

    @property
    def skipped_steps(self) -> int:
        """Training batches whose optimizer step was skipped for a non-finite loss (``nonfinite_loss='skip'``)."""
        return self._loss_check.skipped

    def close(self) -> None:
        """Stop the engine's replica worker threads; the model cannot train or predict afterwards."""
        if self.engine is not None:
            self.engine.close()

    def __enter__(self) -> 'TorchModel':
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    @classmethod
    def from_file(cls, path: str, fmt: str | None = None, *, trusted: bool = False,
                  **overrides: Any) -> 'TorchModel':
        """A new model from a file of ``save`` (or an export's metadata file, or a bare TorchScript or ``.pt2``
        file); ``overrides`` change config items such as ``device`` or ``microbatch``. Read safely: a file whose
        network or config names code other than torch's and flowpipe's needs ``trusted=True``, which runs it."""
        return export.from_file(path, None if cls is TorchModel else cls, fmt, trusted=trusted, **overrides)

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


io.register_class(TorchModel)


def _short(loss_fn: Any) -> str:
    text = repr(loss_fn)
    return text if len(text) < 60 else type(loss_fn).__name__
