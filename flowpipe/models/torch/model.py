"""``TorchModel``: a network, its loss, optimizer and scheduler, built from one config.

Who owns what: ``config.parse_config`` reads inputs and targets, ``losses.make_loss`` the ``loss`` key,
``optimizers`` the ``optimizer`` and ``decay`` keys, ``flowpipe.parallel`` the ``device``, ``microbatch``,
``device_weights``, ``device_map`` and ``amp`` keys (one plan, one engine: every step is delegated to
``self.engine``), ``io`` saving and loading. Ready networks (``ResNet18``...) are subclasses that only say how to
make their ``nn.Module``.
"""
from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from typing import Any, Callable, ClassVar

import numpy as np
import torch
from torch import nn

from ...parallel import build_engine, make_plan
from . import io
from .config import ModelSpec, nest, parse_config
from .losses import make_loss
from .optimizers import make_decay, make_optimizer

__all__ = ['FETCHES', 'TorchModel', 'check_fetches']

FETCHES = ('loss', 'predictions', 'proba', 'labels')
_DTYPES = {'float16': torch.float16, 'bfloat16': torch.bfloat16, 'float32': torch.float32,
           'float64': torch.float64, 'double': torch.float64, 'float': torch.float32}


class TorchModel:
    """A trainable PyTorch model configured by a dict with ``'/'`` keys (see ``docs/models.md``).

    Args:
        config: a dict, nested dict or ``flowpipe.Config``.
        **overrides: config items given as keywords (``device='cpu'``), merged over ``config``.

    Attributes:
        spec: the parsed config (inputs, targets, shapes, classes).
        engine: the ``flowpipe.parallel`` engine every step goes through.
        loss_fn: ``loss_fn(outputs, *targets)``.
        optimizer: the optimizer over ``engine.parameters()``.
        decay: the learning-rate scheduler wrapper, or ``None``.
        iteration: training batches seen so far.
    """

    #: ``(input_shape, num_outputs, **options) -> nn.Module`` for ready networks; ``None`` needs ``config['model']``.
    network_factory: ClassVar[Callable[..., nn.Module] | None] = None
    #: config path -> keyword of ``network_factory`` (``'body/filters': 'filters'``).
    network_options: ClassVar[dict[str, str]] = {}

    def __init__(self, config: Mapping | None = None, **overrides: Any):
        self.config = nest(config)
        if overrides:
            self.config = nest({**_flat_paths(self.config), **overrides})
        self.spec: ModelSpec = parse_config(self.config)
        network = self._make_network()
        plan = make_plan(**{key: self.spec.get(key) for key in ('device', 'microbatch', 'device_weights',
                                                                 'device_map')}, amp=bool(self.spec.get('amp')))
        self.engine = build_engine(network, plan)
        self.loss_fn = make_loss(self.spec.get('loss'), has_classes=bool(self.spec.classes))
        self.optimizer = make_optimizer(self.spec.get('optimizer'), self.engine.parameters())
        self.decay = make_decay(self.spec.get('decay'), self.optimizer)
        self.iteration = 0
        self._last_batch_size: int | None = None
        # Steps from concurrent threads (a prefetching run without use_lock) must not interleave gradients.
        self._step_lock = threading.Lock()

    # building

    def _make_network(self) -> nn.Module:
        ready = self.spec.get('model')
        if ready is not None:
            network = ready if isinstance(ready, nn.Module) else ready() if callable(ready) else ready
            if not isinstance(network, nn.Module):
                raise TypeError(f"Expected config 'model' as an nn.Module or a callable that makes one. "
                                f"Received: {type(network).__name__} {network!r}.")
        else:
            network = self.build_network(self.spec)
        dtype = self.spec.get('dtype')
        if dtype is not None:
            network = network.to(_as_dtype(dtype))
        return network

    def build_network(self, spec: ModelSpec) -> nn.Module:
        """Make the ``nn.Module`` from the parsed config; ready networks use ``network_factory``."""
        factory = type(self).network_factory
        if factory is None:
            raise ValueError(f"Expected a network: {type(self).__name__} builds none by itself. Received: no "
                             "'model' in the config. Pass 'model': an nn.Module, or use a ready network class "
                             "such as ResNet18 or SimpleCNN.")
        options = {keyword: spec.get(path) for path, keyword in self.network_options.items()
                   if spec.get(path) is not None}
        return factory(spec.input_shape, spec.num_outputs, **options)

    @property
    def model(self) -> nn.Module:
        """The primary ``nn.Module`` (the replica that holds the optimizer's parameters)."""
        return self.engine.module

    @property
    def plan(self) -> Any:
        """The engine's frozen ``DevicePlan``."""
        return self.engine.plan

    def device_plan(self, batch_size: int | None = None) -> str:
        """Readable placement: devices, shard sizes and micro-batch chunks for ``batch_size``."""
        return self.engine.plan.describe(batch_size)

    # steps

    def train(self, *args: Any, fetches: Any = None, inputs: Any = None, targets: Any = None,
              **named_inputs: Any) -> Any:
        """One optimizer step on a batch.

        Args:
            *args: network inputs then targets, in config order.
            fetches: ``'loss'``, ``'predictions'``, ``'proba'``, ``'labels'``, a list of them, or ``None``.
            inputs: network input(s), instead of naming them.
            targets: target(s), instead of naming them.
            **named_inputs: inputs and targets by their config names (``images=..., labels=...``).

        Returns:
            The fetched values (numpy arrays, the loss as a float), in the order asked; ``None`` without fetches.
        """
        names = check_fetches(fetches)
        net_inputs, net_targets = self._collect(args, inputs, targets, named_inputs, need_targets=True)
        wants_outputs = any(name != 'loss' for name in names)
        with self._step_lock:
            result = self.engine.train_step(net_inputs, net_targets, self.loss_fn, self.optimizer,
                                            return_outputs=wants_outputs)
            self.iteration += 1
            self._last_batch_size = int(net_inputs[0].shape[0])
            if self.decay is not None:
                self.decay.after_batch(self.iteration)
        return self._fetch(fetches, names, lambda: result.loss, result.outputs)

    def predict(self, *args: Any, fetches: Any = 'predictions', inputs: Any = None, targets: Any = None,
                **named_inputs: Any) -> Any:
        """Outputs for a batch in evaluation mode, without gradients; arguments as in ``train``.

        Targets are needed only to fetch ``'loss'``.
        """
        names = check_fetches(fetches)
        net_inputs, net_targets = self._collect(args, inputs, targets, named_inputs, need_targets='loss' in names)
        with self._step_lock:
            outputs = self.engine.predict(net_inputs)

        def loss() -> float:
            moved = [target.to(outputs.device) for target in net_targets]
            moved = [t.to(outputs.dtype) if t.is_floating_point() else t for t in moved]
            with torch.no_grad():
                return float(self.loss_fn(outputs, *moved))
        return self._fetch(fetches, names, loss, outputs)

    # inputs and outputs

    def _collect(self, args: tuple, inputs: Any, targets: Any, named: dict,
                 need_targets: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Network input tensors and target tensors, from any of the accepted forms."""
        values = _by_name(args, named, self.spec.input_names, self.spec.target_names)
        input_names = self.spec.input_names or ('inputs',)
        if inputs is not None:
            values.update(zip(input_names, _as_list(inputs)))
        target_names = self.spec.target_names
        if targets is not None:
            target_names = target_names or tuple(f'target{i}' for i in range(len(_as_list(targets))))
            values.update(zip(target_names, _as_list(targets)))
        elif not target_names:
            target_names = tuple(name for name in values if name not in input_names)
        _require(input_names, values, 'the network inputs', 'inputs=')
        if need_targets:
            _require(target_names, values, 'the targets for training or a loss', 'targets=')
        return ([_to_tensor(values[name], name) for name in input_names],
                [self._target(values[name], name) for name in target_names if name in values])

    def _target(self, value: Any, name: str) -> torch.Tensor:
        tensor = _to_tensor(value, name)
        if name in self.spec.classes and not tensor.is_floating_point() and tensor.dtype != torch.int64:
            tensor = tensor.long()  # class losses index with int64; int32/uint8 labels stay integer, widened
        return tensor

    def _fetch(self, fetches: Any, names: list[str], loss: Callable[[], float], outputs: Any) -> Any:
        if fetches is None:
            return None
        values = [_fetch_value(name, loss, outputs) for name in names]
        if isinstance(fetches, str):
            return values[0]
        return type(fetches)(values) if isinstance(fetches, (list, tuple)) else values

    def close(self) -> None:
        """Stop the engine's replica worker threads; the model cannot train or predict afterwards."""
        self.engine.close()

    def __enter__(self) -> 'TorchModel':
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # save / load

    def save(self, path: str) -> None:
        """Write the model (network, optimizer, scheduler, config) to ``path`` atomically, with dill."""
        io.save(self, path)

    def load(self, path: str) -> 'TorchModel':
        """Load weights and optimizer state saved by ``save`` into this model, keeping its own placement."""
        io.load_into(self, io.read(path))
        return self

    @classmethod
    def from_file(cls, path: str, **overrides: Any) -> 'TorchModel':
        """A new model from a file; ``overrides`` change config items such as ``device`` or ``microbatch``."""
        return io.load(path, model_class=None if cls is TorchModel else cls, **overrides)

    def __repr__(self) -> str:
        inputs = ', '.join(f'{name} {self.spec.shapes.get(name, "")}'.strip() for name in self.spec.input_names)
        targets = ', '.join(f'{name} ({self.spec.classes[name]} classes)' if name in self.spec.classes else name
                            for name in self.spec.target_names)
        parameters = sum(p.numel() for p in self.model.parameters())
        lines = [f'{type(self).__name__}(network={type(self.model).__name__}, {parameters:,} parameters, '
                 f'inputs: {inputs or "?"} -> targets: {targets or "?"})',
                 f'  loss={_short(self.loss_fn)}, optimizer={type(self.optimizer).__name__}'
                 f'(lr={self.optimizer.param_groups[0].get("lr")}), decay={self.decay}, '
                 f'trained on {self.iteration} batch{"" if self.iteration == 1 else "es"}',
                 *('  ' + line for line in self.device_plan(self._last_batch_size).splitlines())]
        return '\n'.join(lines)


def _flat_paths(config: Mapping, prefix: str = '') -> dict:
    flat = {}
    for key, value in config.items():
        path = f'{prefix}{key}'
        if isinstance(value, dict) and value and key != 'device_map':
            flat.update(_flat_paths(value, path + '/'))
        else:
            flat[path] = value
    return flat


def _as_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.replace('torch.', '') in _DTYPES:
        return _DTYPES[dtype.replace('torch.', '')]
    raise ValueError(f"Expected 'dtype' as a torch dtype or one of {sorted(_DTYPES)}. Received: dtype={dtype!r}.")


def check_fetches(fetches: Any) -> list[str]:
    """The fetch names as a list; a ``ValueError`` naming close matches for an unknown one."""
    if fetches is None:
        return []
    names = [fetches] if isinstance(fetches, str) else list(fetches)
    for name in names:
        if name not in FETCHES:
            close = difflib.get_close_matches(str(name), FETCHES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ''
            raise ValueError(f"Expected fetches among {list(FETCHES)}. Received: {name!r}.{hint}")
    return names


def _by_name(args: tuple, named: dict, input_names: tuple, target_names: tuple) -> dict:
    order = (*input_names, *target_names)
    if order and len(args) > len(order):
        raise ValueError(f"Expected at most {len(order)} positional inputs {list(order)}. "
                         f"Received: {len(args)}. Pass the extra ones by name.")
    values = dict(zip(order or ('inputs', *[f'target{i}' for i in range(len(args) - 1)]), args))
    for name, value in named.items():
        if order and name not in order:
            close = difflib.get_close_matches(name, order, n=2)
            hint = f" Did you mean {close}?" if close else ''
            raise ValueError(f"Expected inputs named in the model config {list(order)}. Received: {name!r}."
                             f"{hint} Declare it as 'inputs/{name}/shape' or rename it.")
        if not order:
            raise ValueError(f"Expected positional inputs or inputs=/targets=: the model config declares no "
                             f"inputs. Received: {name!r}=... . Add 'inputs/{name}/...' to the config.")
        values[name] = value
    return values


def _require(names: tuple, values: dict, what: str, keyword: str) -> None:
    if any(name not in values for name in names):
        raise ValueError(f"Expected {what} {list(names)!r}. Received: {sorted(values)!r}. "
                         f"Pass them by name, positionally or as {keyword}.")


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _to_tensor(value: Any, name: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    array = np.asarray(value)
    if array.dtype == object:
        raise TypeError(f"Expected {name!r} as a numeric array or tensor. Received: an object array of shape "
                        f"{array.shape} (items of different shapes?). Make one array first, e.g. with to_array().")
    if not array.flags.writeable:
        array = array.copy()
    return torch.from_numpy(array)


def _fetch_value(name: str, loss: Callable[[], float], outputs: Any) -> Any:
    if name == 'loss':
        return loss()
    if not isinstance(outputs, torch.Tensor):
        if name == 'predictions':
            return _to_numpy(outputs)
        raise TypeError(f"Expected one output tensor to compute {name!r}. Received: {type(outputs).__name__}. "
                        "Fetch 'predictions' instead.")
    if name == 'predictions':
        return _to_numpy(outputs)
    if name == 'proba':
        return _to_numpy(torch.softmax(outputs.float() if outputs.dtype in (torch.float16, torch.bfloat16)
                                       else outputs, dim=1))
    return _to_numpy(outputs.argmax(dim=1))


def _to_numpy(outputs: Any) -> Any:
    if isinstance(outputs, torch.Tensor):
        tensor = outputs.detach()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        return tensor.cpu().numpy()
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_to_numpy(item) for item in outputs)
    if isinstance(outputs, dict):
        return {key: _to_numpy(value) for key, value in outputs.items()}
    return outputs


def _short(loss_fn: Any) -> str:
    text = repr(loss_fn)
    return text if len(text) < 60 else type(loss_fn).__name__
