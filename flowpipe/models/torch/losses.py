"""Resolve the ``loss`` key of a model config into a callable ``loss_fn(outputs, *targets)``.

Accepted forms: a short name (``'ce'``, ``'crossentropy'``, ``'mse'``, ``'l1'``, ``'bce'``, ``'nll'``, ``'huber'``,
batchflow's segmentation losses ``'dice'``, ``'bdice'``, ``'btversky'``, ``'lovasz'``, ``'blovasz'``, ``'ssim'``),
the name of any ``torch.nn`` loss class (``'CrossEntropyLoss'``, case-insensitive), a dict
``{'name': ..., **kwargs}``, a loss class, a loss instance or any callable. Losses that compare values
(``mse``, ``l1``, ``bce``, ``huber``) get their targets cast to the outputs' dtype, so integer targets can be kept
integer in the data.

A torch loss (by name, class or instance) comes back as a ``flowpipe.parallel.losses.TorchLoss``: the module itself
when called, and in the normalized form the engines divide each piece's sum by the whole batch's normalizer with
(``docs/parallel.md``, "Losses"); ``loss_fn.loss`` is the module. A loss flowpipe cannot place (an unknown class,
``reduction='none'``, a plain function) comes back as given.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch import nn

from ...parallel.losses import NormalizedLoss, torch_normalized
from .segmentation_losses import SEGMENTATION_LOSSES

__all__ = ['LOSS_ALIASES', 'NormalizedLoss', 'make_loss']

LOSS_ALIASES = {
    'ce': nn.CrossEntropyLoss, 'crossentropy': nn.CrossEntropyLoss, 'cross_entropy': nn.CrossEntropyLoss,
    'mse': nn.MSELoss, 'l2': nn.MSELoss, 'l1': nn.L1Loss, 'mae': nn.L1Loss,
    'bce': nn.BCEWithLogitsLoss, 'nll': nn.NLLLoss, 'huber': nn.HuberLoss, 'smoothl1': nn.SmoothL1Loss,
}

_FLOAT_TARGET_LOSSES = (nn.MSELoss, nn.L1Loss, nn.BCEWithLogitsLoss, nn.BCELoss, nn.HuberLoss, nn.SmoothL1Loss)


class _FloatTargets:
    """Calls a value-comparing loss with targets cast to the outputs' dtype."""

    float_targets = True

    def __init__(self, loss: nn.Module):
        self.loss = loss

    def __call__(self, outputs: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
        return self.loss(outputs, *(target.to(outputs.dtype) for target in targets))

    def __repr__(self) -> str:
        return repr(self.loss)


def _torch_losses() -> dict[str, type]:
    return {name.lower(): cls for name, cls in vars(nn).items()
            if isinstance(cls, type) and issubclass(cls, nn.modules.loss._Loss) and name.endswith('Loss')}


def _loss_class(name: str) -> type:
    key = name.lower()
    if key in LOSS_ALIASES:
        return LOSS_ALIASES[key]
    if key in SEGMENTATION_LOSSES:
        return SEGMENTATION_LOSSES[key]
    known = _torch_losses()
    for candidate in (key, key + 'loss'):
        if candidate in known:
            return known[candidate]
    close = difflib.get_close_matches(key, [*LOSS_ALIASES, *SEGMENTATION_LOSSES, *known], n=3, cutoff=0.5)
    hint = f" Did you mean {close}?" if close else ''
    raise ValueError(f"Expected a loss name such as 'ce', 'mse', 'bce' or a torch.nn loss class name. "
                     f"Received: loss={name!r}.{hint}")


def make_loss(spec: Any, has_classes: bool = True) -> Callable[..., torch.Tensor]:
    """A ``loss_fn(outputs, *targets)`` for a config's ``loss`` value (``None``: cross-entropy for classes)."""
    kwargs: dict = {}
    if spec is None:
        if not has_classes:
            raise ValueError("Expected a 'loss' in the model config: no target declares 'classes', so "
                             "cross-entropy is not assumed. Received: loss=None. Set e.g. 'loss': 'mse'.")
        spec = 'ce'
    if isinstance(spec, Mapping):
        kwargs = {key: value for key, value in spec.items() if key != 'name'}
        if 'name' not in spec:
            raise ValueError(f"Expected a 'name' in the loss dict. Received: loss={dict(spec)!r}. "
                             "Use e.g. {'name': 'ce', 'label_smoothing': 0.1}.")
        spec = spec['name']
    if isinstance(spec, str):
        spec = _loss_class(spec)
    if isinstance(spec, type):
        spec = spec(**kwargs)
    elif kwargs:
        raise TypeError(f"Expected a loss name or class when loss options are given. Received: {spec!r} "
                        f"with options {kwargs!r}.")
    if not callable(spec):
        raise TypeError(f"Expected a loss name, class, instance or callable. Received: loss={spec!r}.")
    float_targets = isinstance(spec, _FLOAT_TARGET_LOSSES)
    placed = torch_normalized(spec, float_targets) if isinstance(spec, nn.modules.loss._Loss) else None
    if placed is not None:
        return placed
    return _FloatTargets(spec) if float_targets else spec
