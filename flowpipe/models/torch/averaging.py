"""Weight averaging: batchflow's ``weights_averaging`` key (also ``wa``, ``swa``) on ``torch.optim.swa_utils``.

A config's ``'weights_averaging': {'start_iter': 10, 'last_iter': 100, 'frequency': 5, 'avg_fn': 'swa'}`` keeps an
``AveragedModel`` of the network, updated after training batch ``i`` (1-based, as the decay counts) when
``start_iter <= i < last_iter`` and ``(i - start_iter) % frequency == 0``. After batch ``last_iter`` the network
takes the averaged weights (and buffers) and the optimizer's state (momenta) starts afresh: from then on the model
trains, predicts and saves with the average, as batchflow's ``finalize_wa`` makes it. Keys:

- ``start_iter``, ``last_iter``, ``frequency``: required, as in batchflow;
- ``avg_fn``: ``'swa'`` (or ``'stochastic'``, the default: every update counts equally), ``'ema'`` (or
  ``'exponential'``: ``average = ema_decay * average + (1 - ema_decay) * weights``), or a callable
  ``(averaged_param, model_param, num_averaged) -> new averaged_param`` (torch's ``avg_fn``);
- ``ema_decay``: the weight of the old average under ``'ema'``; 0.1 by default, batchflow's fixed value;
- ``use_buffers``: average the buffers too (torch's ``use_buffers``); by default they follow the network's;
- ``swalr``: keyword arguments of ``torch.optim.swa_utils.SWALR`` (``{'swa_lr': 0.01, 'anneal_epochs': 5}``): made
  on the optimizer with the model and stepped after every update of the average.

The average lives beside the network (a copy on the same devices) and updates after the optimizer step, from the
primary's parameters: every replica and every rank of a distributed job holds the same weights, so every rank's
average is the same. ``TorchModel.predict(..., use_averaged=True)`` predicts with it; model files and run checkpoints
carry it (``state`` / ``load_state``).
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Mapping
from typing import Any, Callable

import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from ...parallel.engines.tensors import concat, move
from ...parallel.split import split_batch
from ...torchutils import to_tensor

__all__ = ['AVERAGING_KEYS', 'Ema', 'WeightAveraging', 'make_averaging']

#: batchflow's names of the one key, in the order batchflow reads them
AVERAGING_KEYS = ('weights_averaging', 'wa', 'swa')
_REQUIRED = ('start_iter', 'last_iter', 'frequency')
_OPTIONS = _REQUIRED + ('avg_fn', 'ema_decay', 'use_buffers', 'swalr')


class Ema:
    """``avg_fn='ema'``: ``decay * averaged + (1 - decay) * current`` (a class, so a model with it pickles)."""

    def __init__(self, decay: float = 0.1):
        self.decay = decay

    def __call__(self, averaged: torch.Tensor, current: torch.Tensor, num_averaged: Any) -> torch.Tensor:
        return self.decay * averaged + (1 - self.decay) * current

    def __repr__(self) -> str:
        return f'Ema({self.decay})'


def make_averaging(config: Mapping, engine: Any, optimizer: torch.optim.Optimizer) -> WeightAveraging | None:
    """The ``WeightAveraging`` a model config asks for (``None`` without one of ``AVERAGING_KEYS``)."""
    given = {key: config[key] for key in AVERAGING_KEYS if config.get(key) is not None}
    if not given:
        return None
    if len(given) > 1:
        raise ValueError(f"Expected one of {list(AVERAGING_KEYS)} (names of the same key). Received: "
                         f"{sorted(given)}. Keep one of them.")
    key, options = given.popitem()
    if getattr(engine.plan, 'engine', None) == 'sharded':
        raise ValueError(f"Expected {key!r} without 'sharding': the averaged copy of a sharded network is not built "
                         f"(FSDP modules cannot be copied). Received: {key!r} with sharding="
                         f"{engine.plan.sharding.mode!r}. Train with 'sharding': None (DDP) to average weights.")
    if not isinstance(options, Mapping):
        raise TypeError(f"Expected {key!r} as a dict with 'start_iter', 'last_iter' and 'frequency'. Received: "
                        f"{options!r}. Use e.g. {{'start_iter': 10, 'last_iter': 100, 'frequency': 5}}.")
    missing = [name for name in _REQUIRED if name not in options]
    unknown = sorted(name for name in options if name not in _OPTIONS)
    if missing or unknown:
        raise ValueError(f"Expected {key!r} with the keys {list(_REQUIRED)} and optionally {list(_OPTIONS[3:])}. "
                         f"Received: {sorted(options)} (missing {missing}, unknown {unknown}).")
    return WeightAveraging(engine, optimizer, key=key, **options)


def _check_count(key: str, name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"Expected {key}/{name} as an int >= {low} (a 1-based training batch number or a count). "
                         f"Received: {name}={value!r}.")
    return int(value)


def _average_function(key: str, avg_fn: Any, ema_decay: Any) -> Callable | None:
    if avg_fn in (None, 'swa', 'stochastic'):
        return None
    if avg_fn in ('ema', 'exponential'):
        if isinstance(ema_decay, bool) or not isinstance(ema_decay, numbers.Real) or not 0 <= ema_decay < 1:
            raise ValueError(f"Expected {key}/ema_decay as a number in [0, 1) (the old average's weight). Received: "
                             f"ema_decay={ema_decay!r}.")
        return Ema(float(ema_decay))
    if callable(avg_fn):
        return avg_fn
    raise ValueError(f"Expected {key}/avg_fn as 'swa', 'ema' or a callable (averaged, current, num_averaged). "
                     f"Received: avg_fn={avg_fn!r}.")


class WeightAveraging:
    """The averaged network of a model and when it updates (see the module docstring).

    Attributes:
        averaged: the ``torch.optim.swa_utils.AveragedModel``; ``averaged.module`` is the averaged network.
        swalr: the ``SWALR`` scheduler, or ``None``.
        iterations: the training batches after which the average was updated, then the one after which the network
            took it (batchflow's ``wa_iters``).
        finalized: whether the network has taken the average (after batch ``last_iter``).
    """

    def __init__(self, engine: Any, optimizer: torch.optim.Optimizer, *, start_iter: int, last_iter: int,
                 frequency: int, avg_fn: Any = 'swa', ema_decay: float = 0.1, use_buffers: bool = False,
                 swalr: Mapping | None = None, key: str = 'weights_averaging'):
        self.start_iter = _check_count(key, 'start_iter', start_iter, 0)
        self.last_iter = _check_count(key, 'last_iter', last_iter, self.start_iter)
        self.frequency = _check_count(key, 'frequency', frequency, 1)
        if not isinstance(use_buffers, bool):
            raise TypeError(f"Expected {key}/use_buffers as a bool. Received: {use_buffers!r}.")
        self.engine, self.optimizer = engine, optimizer
        self.averaged = AveragedModel(engine.module, avg_fn=_average_function(key, avg_fn, ema_decay),
                                      use_buffers=use_buffers)
        if swalr is not None and not isinstance(swalr, Mapping):
            raise TypeError(f"Expected {key}/swalr as a dict of SWALR's arguments. Received: {swalr!r}. Use e.g. "
                            f"{{'swa_lr': 0.01}}.")
        self.swalr = None if swalr is None else SWALR(optimizer, **swalr)
        self.iterations: list[int] = []
        self.finalized = False

    @property
    def module(self) -> nn.Module:
        """The averaged network."""
        return self.averaged.module

    def after_batch(self, iteration: int) -> None:
        """After training batch ``iteration`` (1-based): update the average, or hand it to the network."""
        if iteration >= self.last_iter and not self.finalized:
            self.finalize(iteration)
        elif self.start_iter <= iteration <= self.last_iter and (iteration - self.start_iter) % self.frequency == 0:
            self.averaged.update_parameters(self.engine.module)
            self.iterations.append(iteration)
            if self.swalr is not None:
                self.swalr.step()

    @torch.no_grad()
    def finalize(self, iteration: int) -> None:
        """The network takes the averaged weights and buffers (on every replica) and the optimizer's state starts
        afresh, as batchflow's new optimizer does."""
        network = self.engine.module
        targets = [*network.parameters(), *network.buffers()]
        sources = [*self.module.parameters(), *self.module.buffers()]
        for target, source in zip(targets, sources):
            target.copy_(source)
        self.optimizer.state.clear()
        self.engine.sync()
        self.iterations.append(iteration)
        self.finalized = True

    def predict(self, inputs: list[torch.Tensor]) -> Any:
        """The averaged network's outputs for a batch (evaluation mode, no gradients), micro-batch by micro-batch on
        the primary device, under the engine's autocast."""
        engine = self.engine
        batch = engine.prepare(inputs, ())
        device = engine.devices[0]
        self.module.train(False)
        pieces = split_batch(batch.size, 1, engine.plan.microbatch) if batch.size else (None,)
        with torch.no_grad(), engine.precision.autocast(device):
            return concat([self.module(*[move(t, device, batch.dtype, piece, engine.memory_format)
                                         for t in batch.inputs]) for piece in pieces])

    def update_bn(self, batches: Iterable) -> None:
        """Recompute the averaged network's BatchNorm statistics over ``batches`` (torch's ``update_bn``): each an
        input of the network (array or tensor) or a tuple whose first item is. In a distributed job every rank
        must give the same batches, or the ranks' averages differ."""
        device, dtype = self.engine.devices[0], self.engine.compute_dtype()

        def inputs() -> Iterable[torch.Tensor]:
            for item in batches:
                tensor = to_tensor(item[0] if isinstance(item, (list, tuple)) else item, 'update_bn batch')
                yield move(tensor, device, dtype, None, self.engine.memory_format)
        update_bn(inputs(), self.module)

    def state(self) -> dict:
        """The average (CPU tensors), the scheduler, the updates so far: what model files and checkpoints keep."""
        return {'averaged': {key: value.detach().to('cpu', copy=True)
                             for key, value in self.averaged.state_dict().items()},
                'swalr': None if self.swalr is None else self.swalr.state_dict(),
                'iterations': list(self.iterations), 'finalized': self.finalized}

    def load_state(self, state: Mapping) -> None:
        """Restore ``state()``."""
        self.averaged.load_state_dict(state['averaged'])
        if self.swalr is not None and state.get('swalr') is not None:
            self.swalr.load_state_dict(state['swalr'])
        self.iterations = list(state.get('iterations', ()))
        self.finalized = bool(state.get('finalized', False))

    def __repr__(self) -> str:
        return (f'WeightAveraging(batches {self.start_iter}..{self.last_iter} every {self.frequency}, '
                f'{len(self.iterations) - self.finalized} updates{", finalized" if self.finalized else ""})')
