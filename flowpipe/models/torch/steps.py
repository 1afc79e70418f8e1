"""``TorchModel``'s steps: ``train`` (one optimizer step through the engine, then the schedules, averaging,
history and the model's callbacks) and ``predict``, and the step's inputs and fetches (the accepted forms of
inputs and targets turned into tensors, the fetched values out).

``ModelSteps`` is one of ``TorchModel``'s bases (``model.py``); a step builds a network deferred for want of a
shape (``building.py``) before it runs.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from ...data.shards import run_context
from ...parallel.engines.sam import make_sam
from ...torchutils import to_tensor
from .inputs import DEFAULT_INPUT, as_list, by_name, check_fetches, fetch_value, pick_fetches, require
from .profiling import profiled as _profiled

__all__ = ['ModelSteps']


class ModelSteps:
    """``TorchModel``'s ``train`` and ``predict``, each under the model's step lock."""

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
                                                clip_grad_value=self.clip_grad_value, seed=seed, sam=sam,
                                                run=run_context())
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
            run = run_context()         # where the step lies in its run: the engine's call takes it
            outputs = self._averaged().predict(net_inputs) if use_averaged else self.engine.predict(net_inputs, run)

        def loss() -> float:
            """The batch's loss; in a distributed run the global batch's, whose shards the ranks hold."""
            moved = [target.to(outputs.device) for target in net_targets]
            moved = [t.to(outputs.dtype) if t.is_floating_point() else t for t in moved]
            return self.engine.predicted_loss(self.loss_fn, outputs, moved, run)
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
