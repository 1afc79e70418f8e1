"""How a ``TorchModel`` comes to hold its network: the config checked for keys it does not read, the
``nn.Module`` made (a ready one, the config's sections or a ready network's factory), then the engine, loss,
optimizer, schedules and averaging built around it, at once or, without the input's shape, at the first step.

``ModelBuilding`` is one of ``TorchModel``'s bases (``model.py``); it also gives the placement the model is built
for: ``plan``, ``device_plan`` and the primary ``model``.
"""
from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

from ...parallel import build_engine, distributed, make_plan
from ...parallel.losses import TorchLoss
from ...plan_keys import PLAN_KEYS
from .averaging import make_averaging
from .batchflow_keys import apply_benchmark, apply_init_weights, apply_trainable, check_batchflow_keys
from .checkpointing import apply_checkpointing, describe_checkpointing
from .checks import BatchNormCheck
from .config import ModelSpec, as_dtype, parse_config, unknown_keys
from .decay import make_decay
from .inputs import DEFAULT_INPUT
from .losses import make_loss
from .optimizers import make_optimizer
from .outputs import adapt_forwards
from .sections import has_sections, network_from_sections

__all__ = ['ModelBuilding']


class ModelBuilding:
    """``TorchModel``'s network, engine, loss and optimizer, built from its parsed config (``self.spec``)."""

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
        adapt_forwards(self.engine, self.spec.input_names or (DEFAULT_INPUT,), self.spec.get('keyword_inputs', False),
                       self.prediction_field, isinstance(self.loss_fn, TorchLoss))
        self.optimizer = make_optimizer(self.spec.get('optimizer'), self.engine.parameters(),
                                        self.engine.module.named_parameters())
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
