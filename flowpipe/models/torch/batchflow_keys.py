"""batchflow's ``TorchModel`` config keys that flowpipe does not read: each one is refused with the difference and
the fix, so that a ported config never trains differently without an error.

batchflow 0.10.1 reads these model config keys (its ``default_config`` and what its code reads): ``amp``,
``device``, ``benchmark``, ``channels_last``, ``microbatch``/``microbatch_size``, ``sync_frequency``, ``profile``,
``order``, ``trainable``, ``initial_block``, ``body``, ``head``, ``common``, ``output``,
``inputs_shapes``/``input_shapes``, ``targets_shapes``/``target_shapes``, ``classes``, ``placeholder_batch_size``,
``loss``, ``optimizer``, ``decay``, ``gradient_clipping``, ``weights_averaging``/``wa``/``swa``, ``sam_rho``,
``sam_individual_norm``, ``callbacks``, ``model``, ``init_weights`` and ``load``. ``docs/porting.md`` lists each
with its status in flowpipe. The ones read elsewhere: ``config`` (aliases), ``model`` (the rest), ``output``
(``inputs.check_output``), ``sections`` (``order``, ``initial_block``, ``body``, ``head``, ``common``),
``init_weights`` here (``apply_init_weights``), ``trainable`` here (``apply_trainable``), ``benchmark`` here
(``apply_benchmark``).

A value equal to batchflow's default, which changes nothing, is accepted for a refused key (``'load': None``,
``'sync_frequency': 1``): a config copied from batchflow's defaults still builds.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch import nn

__all__ = ['BLOCK_SECTIONS', 'REFUSED', 'apply_benchmark', 'apply_init_weights', 'apply_trainable',
           'check_batchflow_keys', 'resnet_init']

#: refused top-level key -> (values that change nothing in batchflow, the difference and the fix)
REFUSED: dict[str, tuple[tuple, str]] = {
    'sync_frequency': ((None, False, 1), "flowpipe applies the gradients at every train step and does not "
                       "accumulate them across steps. Train on a batch sync_frequency times larger with "
                       "'microbatch': the old batch size (the same gradient, one step)"),
    'load': ((None,), "a model file is loaded by TorchModel.from_file(path) (or model.load(path), or the "
             "load_model action), not by a config key"),
}
#: batchflow's network sections of every config (``order`` may name more).
BLOCK_SECTIONS = ('initial_block', 'body', 'head', 'common')


def check_batchflow_keys(config: Mapping, network_options: Mapping, own_keys: tuple[str, ...] = ()) -> None:
    """Raise a ``ValueError`` for a batchflow key that flowpipe does not read (see ``REFUSED``), a ``TypeError``
    for a network section that is neither a dict nor an ``nn.Module``, and a ``ValueError`` for an ``order``
    other than ``initial_block, body, head`` in a ready network's class. The sections' parameters are read by
    ``flowpipe.models.torch.sections`` (a ready ``model`` skips them, as in batchflow)."""
    for key, (harmless, why) in REFUSED.items():
        if key in config and key not in own_keys and not _among(config[key], harmless):
            raise ValueError(f"Expected no batchflow model config key {key!r}: {why}. Received: "
                             f"{key}={config[key]!r}.")
    if config.get('model') is not None:
        return          # batchflow too reads no block parameters when given a ready module
    order = config.get('order')
    if order is not None and network_options and list(order) != ['initial_block', 'body', 'head']:
        raise ValueError(f"Expected no 'order' other than ['initial_block', 'body', 'head'] for a ready network, "
                         f"whose parts are those. Received: order={order!r}. Use TorchModel for other parts.")
    for section in (*BLOCK_SECTIONS, *(order or ())):
        value = config.get(section)
        if section in own_keys or value is None or isinstance(value, (Mapping, nn.Module)):
            continue
        raise TypeError(f"Expected the network section {section!r} as a dict of parameters or an nn.Module. "
                        f"Received: {section}={value!r}.")


def _among(value: Any, harmless: tuple) -> bool:
    return any(value is item or (type(value) is type(item) and value == item) for item in harmless)


def apply_benchmark(value: Any) -> None:
    """batchflow's ``benchmark``: ``torch.backends.cudnn.benchmark = value`` where CUDA is present (a process-wide
    setting, as in batchflow); nothing on a machine without CUDA."""
    if value is None:
        return
    if not isinstance(value, bool):
        raise TypeError(f"Expected 'benchmark' as True or False (cudnn's autotuner). Received: {value!r}.")
    if torch.cuda.is_available():
        torch.backends.cudnn.benchmark = value


@torch.no_grad()
def resnet_init(module: nn.Module) -> None:
    """The usual ResNet initialization: Kaiming-normal convolutions (fan out, ReLU), norm layers at weight 1 and
    bias 0 (batchflow's ``'best_practice_resnet'``, ``'resnet'``, ``'classic'``)."""
    if isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        nn.init.kaiming_normal_(module.weight, mode='fan_out', nonlinearity='relu')
    elif isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.GroupNorm)) and module.affine:
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


_NAMED_INITS: dict[str, Callable[[nn.Module], None]] = {
    'best_practice_resnet': resnet_init, 'resnet': resnet_init, 'classic': resnet_init}


def apply_init_weights(network: nn.Module, value: Any) -> None:
    """batchflow's ``init_weights``: a callable (or a name in ``'best_practice_resnet'``, ``'resnet'``,
    ``'classic'``) applied to every submodule, a ``(function, 'part')`` tuple applied to the attribute ``part`` of
    the network, or a list of them applied in order."""
    if value is None:
        return
    for item in value if isinstance(value, list) else [value]:
        function, part = item if isinstance(item, tuple) and len(item) == 2 else (item, None)
        function = _NAMED_INITS.get(function, function) if isinstance(function, str) else function
        if not callable(function):
            raise ValueError(f"Expected 'init_weights' as a callable, one of {sorted(_NAMED_INITS)}, a (function, "
                             f"'part') tuple or a list of them. Received: {item!r}.")
        target = network
        if part is not None:
            target = getattr(network, part, None)
            if not isinstance(target, nn.Module):
                names = [name for name, _ in network.named_children()]
                raise ValueError(f"Expected the part of 'init_weights' to name a submodule of the network "
                                 f"{names}. Received: {part!r}.")
        target.apply(function)


def apply_trainable(network: nn.Module, value: Any) -> None:
    """batchflow's ``trainable``: the names of the network's parts (its children: ``'initial_block'``, ``'body'``,
    ``'head'``, or the sections of ``order``) that train; the parameters of the other parts are frozen
    (``requires_grad=False``). ``None`` trains every part."""
    if value is None:
        return
    names = [value] if isinstance(value, str) else value
    parts = dict(network.named_children())
    if not isinstance(names, (list, tuple)) or any(name not in parts for name in names):
        raise ValueError(f"Expected 'trainable' as names of the network's parts {sorted(parts)}. Received: "
                         f"trainable={value!r}.")
    for name, part in parts.items():
        if name not in names:
            part.requires_grad_(False)
