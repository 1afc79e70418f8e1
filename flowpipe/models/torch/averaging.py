"""Weight averaging: batchflow's ``weights_averaging`` key (also ``wa``, ``swa``) on ``torch.optim.swa_utils``.

A config's ``'weights_averaging': {'start_iter': 10, 'last_iter': 100, 'frequency': 5, 'avg_fn': 'swa'}`` keeps an
``AveragedModel`` of the network, updated after training batch ``i`` (1-based, as the decay counts) when
``start_iter <= i < last_iter`` and ``(i - start_iter) % frequency == 0``. After batch ``last_iter`` the network
takes the averaged weights (and buffers) and the optimizer's state (momenta) starts afresh: from then on the model
trains, predicts and saves with the average, as batchflow's ``finalize_wa`` makes it. Keys:

- ``start_iter``, ``last_iter``, ``frequency``: required, as in batchflow; ``last_iter`` must come after the first
  update (batch ``start_iter``, or ``frequency`` when ``start_iter`` is 0), or the network would take the copy it
  was made with;
- ``avg_fn``: ``'swa'`` (or ``'stochastic'``, the default: every update counts equally), ``'ema'`` (or
  ``'exponential'``: ``average = ema_decay * average + (1 - ema_decay) * weights``), or a callable
  ``(averaged_param, model_param, num_averaged) -> new averaged_param`` (torch's ``avg_fn``);
- ``ema_decay``: the weight of the old average under ``'ema'``, in ``[0, 1)``; 0.1 by default, batchflow's fixed
  value; refused with any other ``avg_fn`` (it would be ignored);
- ``use_buffers``: average the buffers too (torch's ``use_buffers``); by default they follow the network's;
- ``swalr``: keyword arguments of ``torch.optim.swa_utils.SWALR`` (``{'swa_lr': 0.01, 'anneal_epochs': 5}``): made
  on the optimizer with the model and stepped after every update of the average; ``swa_lr`` is required, finite
  and ``>= 0``.

The average lives beside the network (a copy on the same devices) and updates after the optimizer step, from the
primary's parameters: every replica and every rank of a distributed job holds the same weights, so every rank's
average is the same. ``TorchModel.predict(..., use_averaged=True)`` predicts with it, once it holds an update (before
the first one it is the network as it was made: refused); model files and run checkpoints carry it (``state`` /
``load_state``).
"""
from __future__ import annotations

import math
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
    ema = avg_fn in ('ema', 'exponential')
    if ema_decay is not None and not ema:
        raise ValueError(f"Expected {key}/ema_decay only with avg_fn='ema' (the weight of the old average there). "
                         f"Received: ema_decay={ema_decay!r} with avg_fn={avg_fn!r}, which would ignore it. Set "
                         "'avg_fn': 'ema', or leave ema_decay out.")
    if avg_fn in (None, 'swa', 'stochastic'):
        return None
    if ema:
        ema_decay = 0.1 if ema_decay is None else ema_decay
        if isinstance(ema_decay, bool) or not isinstance(ema_decay, numbers.Real) or not 0 <= ema_decay < 1:
            raise ValueError(f"Expected {key}/ema_decay as a number in [0, 1) (the old average's weight). Received: "
                             f"ema_decay={ema_decay!r}. Use e.g. 0.1 (batchflow's) or 0.999 for a slow average.")
        return Ema(float(ema_decay))
    if callable(avg_fn):
        return avg_fn
    raise ValueError(f"Expected {key}/avg_fn as 'swa', 'ema' or a callable (averaged, current, num_averaged). "
                     f"Received: avg_fn={avg_fn!r}.")


def _check_swalr(key: str, swalr: Mapping) -> Mapping:
    """``swalr`` with a learning rate ``swa_lr`` (a number, or one per parameter group) that is finite and >= 0."""
    rates = swalr.get('swa_lr')
    listed = rates if isinstance(rates, (list, tuple)) else [rates]
    wrong = [rate for rate in listed if isinstance(rate, bool) or not isinstance(rate, numbers.Real)
             or not math.isfinite(rate) or rate < 0]
    if 'swa_lr' not in swalr or wrong or not listed:
        raise ValueError(f"Expected {key}/swalr/swa_lr as a finite learning rate >= 0 (or one per parameter group): "
                         f"the rate SWALR anneals to. Received: swalr={dict(swalr)!r}. Use e.g. {{'swa_lr': 0.01}}.")
    return swalr


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
                 frequency: int, avg_fn: Any = 'swa', ema_decay: float | None = None, use_buffers: bool = False,
                 swalr: Mapping | None = None, key: str = 'weights_averaging'):
        self.start_iter = _check_count(key, 'start_iter', start_iter, 0)
        self.frequency = _check_count(key, 'frequency', frequency, 1)
        self.last_iter = _check_count(key, 'last_iter', last_iter, 0)
        if self.last_iter <= self.first_update:
            raise ValueError(f"Expected {key}/last_iter after the first update of the average (training batch "
                             f"{self.first_update}), so that the network takes an average of something. Received: "
                             f"last_iter={last_iter!r} with start_iter={start_iter!r}, frequency={frequency!r}. "
                             f"Set last_iter > {self.first_update}.")
        if not isinstance(use_buffers, bool):
            raise TypeError(f"Expected {key}/use_buffers as a bool. Received: {use_buffers!r}.")
        self.engine, self.optimizer = engine, optimizer
        self.averaged = AveragedModel(engine.module, avg_fn=_average_function(key, avg_fn, ema_decay),
                                      use_buffers=use_buffers)
        if swalr is not None and not isinstance(swalr, Mapping):
            raise TypeError(f"Expected {key}/swalr as a dict of SWALR's arguments. Received: {swalr!r}. Use e.g. "
                            f"{{'swa_lr': 0.01}}.")
        self.swalr = None if swalr is None else SWALR(optimizer, **_check_swalr(key, swalr))
        self.iterations: list[int] = []
        self.finalized = False

    @property
    def first_update(self) -> int:
        """The training batch (1-based) after which the average is first updated."""
        return self.start_iter if self.start_iter >= 1 else self.frequency

    @property
    def updated(self) -> bool:
        """Whether the average holds at least one update (before it, it is the network as it was made)."""
        return int(self.averaged.n_averaged) > 0

    def _check_updated(self, use: str) -> None:
        if not self.updated:
            raise ValueError(f"Expected an average with at least one update for {use}. Received: none yet (the "
                             f"first comes after training batch {self.first_update}; updates so far: "
                             f"{self.iterations}): it would be the network as it was made. Train past batch "
                             f"{self.first_update} first, or predict without use_averaged.")

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
        self._check_updated(f'the network to take it after batch {iteration}')
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
        self._check_updated('predict(use_averaged=True)')
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
