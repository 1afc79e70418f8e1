"""The parts of a ``TorchModel``'s state, listed once (``ModelState.parts``) for model files (``io``) and run
checkpoints (``flowpipe.execution.resume``) alike (the contract: ``flowpipe.stateful``).

The parts, in the order a file keeps them: ``network`` (weights and buffers) and ``optimizer`` (the ``TENSORS``,
which a sharded run checkpoint writes one shard per rank instead: ``sharded_state``), ``decay`` (the schedules),
``precision`` (the gradient scaler under ``amp``), the counters ``iteration`` and ``skipped_steps``, ``callbacks``
(the model's own, matched by kind and order) and ``averaging`` (the averaged network of ``weights_averaging``).

The network's and the optimizer's state go through the engine (``engine.state_dict()``,
``engine.optimizer_state_dict(optimizer)`` and their ``load_`` counterparts), which gives them as one process holds
them whatever the placement (the keys of the network itself, never of a wrapper), as CPU tensors. Under an engine
whose ``collective_state`` is set every rank gathers them together, and only rank 0's state holds them.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from ...errors import ModelFileError
from ...stateful import Attribute, Stateful, load_states, states

__all__ = ['TENSORS', 'ModelState']

#: the parts a sharded run checkpoint keeps in its shards rather than in its file
TENSORS = ('network', 'optimizer')


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to('cpu', copy=True)
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(item) for item in value)
    return value


class _Network:
    """The network's weights and buffers, through the engine."""

    def __init__(self, model: Any):
        self.model = model

    def state(self) -> dict:
        return _to_cpu(self.model.engine.state_dict())

    def load_state(self, state: Mapping) -> None:
        try:
            self.model.engine.load_state_dict(state)
        except RuntimeError as error:
            raise ModelFileError(f"Expected a file with the same network as {type(self.model).__name__} "
                                 f"({type(self.model.model).__name__}). Received a file whose weights do not fit: "
                                 f"{error}") from error


class _Optimizer:
    """The optimizer's state, through the engine (as one process holds it)."""

    def __init__(self, model: Any):
        self.model = model

    def state(self) -> dict:
        return _to_cpu(self.model.engine.optimizer_state_dict(self.model.optimizer))

    def load_state(self, state: Mapping) -> None:
        optimizer = self.model.optimizer
        try:
            self.model.engine.load_optimizer_state_dict(optimizer, state)
        except (ValueError, KeyError) as error:
            raise ModelFileError(f"Expected optimizer state for {type(optimizer).__name__} with the same "
                                 f"parameter groups. Received state that does not fit: {error}") from error


class _Callbacks:
    """The model's callbacks: ``[(kind, state), ...]``. They continue from a file's when they are the same kinds
    in the same order; a model given other callbacks (``from_file(path, callbacks=[...])``) starts them afresh,
    with a warning, and so does one loading a file without callbacks (``default``)."""

    default: tuple = ()

    def __init__(self, model: Any):
        self.callbacks = model.callbacks

    def state(self) -> list:
        return [(type(callback).__name__, callback.state()) for callback in self.callbacks]

    def load_state(self, saved: list) -> None:
        names = [type(callback).__name__ for callback in self.callbacks]
        if [name for name, _ in saved] != names:
            if saved:
                warnings.warn(f"Expected the model's callbacks to be those of the file to continue them. Received: "
                              f"{[name for name, _ in saved]} in the file, {names} in the model. The model's "
                              "callbacks start afresh.", UserWarning, stacklevel=5)
            for callback in self.callbacks:
                callback.reset()
            return
        for callback, (_, state) in zip(self.callbacks, saved):
            callback.load_state(state)


class _SkippedSteps(Attribute):
    """The count of steps skipped for a non-finite loss (kept by the model's loss check)."""

    def __init__(self, model: Any):
        super().__init__(model._loss_check, 'skipped', 0)


class ModelState:
    """``TorchModel``'s side of the contract: its parts, their states, and the sharded form of its tensors."""

    def parts(self) -> dict[str, Stateful | None]:
        """The parts of the model's state by name, in the order files keep them (``None``: a part the model does
        not have, such as ``decay`` without schedules); the model must be built."""
        engine = self._built()
        return {'network': _Network(self), 'optimizer': _Optimizer(self), 'decay': self.decay,
                'precision': engine.precision, 'iteration': Attribute(self, 'iteration', 0),
                'skipped_steps': _SkippedSteps(self), 'callbacks': _Callbacks(self), 'averaging': self.averaging}

    def state(self, tensors: bool = True) -> dict[str, Any]:
        """The states of the model's ``parts`` (CPU tensors); ``tensors=False`` leaves the ``TENSORS`` out
        (``None``), for a checkpoint that writes them as shards (``sharded_state``)."""
        return states(self.parts(), () if tensors else TENSORS)

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Load ``state()`` (a part saved as ``None`` is kept as it is) and place the replicas again."""
        load_states(self.parts(), state)
        self._built().sync()

    def sharded_state(self, with_optimizer: bool | None = None) -> dict:
        """This rank's part of the ``TENSORS`` (``engine.sharded_state_dict``), for a sharded checkpoint."""
        return self._built().sharded_state_dict(self.optimizer, with_optimizer=with_optimizer)

    def load_sharded_state(self, state: Mapping[str, Any]) -> None:
        """Put a ``sharded_state`` read back into the network and optimizer, and place the replicas again."""
        engine = self._built()
        engine.load_sharded_state_dict(self.optimizer, state)
        engine.sync()
