"""Tensor-parallel plans: which children of a network are split over the mesh's ``tp`` axis, and how.

A plan maps child paths (``'0'``, ``'blocks.0.mlp.fc'``, as ``module.get_submodule`` reads them) to a style:

- ``'colwise'``: an ``nn.Linear`` split by output features (its output is split on the last dim);
- ``'rowwise'``: an ``nn.Linear`` split by input features (it takes a split input, its output is summed);
- ``'sequence'``: a norm between split layers, run on a sequence-split activation;
- ``'vocab'``: an ``nn.Embedding`` split by rows (the vocabulary).

``'auto'`` pairs the ``nn.Linear`` layers of every ``nn.Sequential`` in order, colwise then rowwise, where only
element-wise layers stand between the two of a pair; a network may carry its own plan as a method
``tensor_parallel_plan(self) -> dict[str, str]``, read when the config names none. This module checks plans against
the network and the ``tp`` size (``resolve_tensor_plan``) and turns them into DTensor's parallel styles
(``parallel_styles``); it runs no collective.
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from torch import nn

__all__ = ['STYLES', 'apply_tensor_parallel', 'parallel_styles', 'resolve_tensor_plan']

#: the styles a plan names, each with the layer types it accepts
STYLES = {'colwise': (nn.Linear,), 'rowwise': (nn.Linear,),
          'sequence': (nn.LayerNorm, nn.GroupNorm, *((nn.RMSNorm,) if hasattr(nn, 'RMSNorm') else ())),
          'vocab': (nn.Embedding,)}

#: layers that act on each entry alone, so they may stand between a colwise layer and its rowwise partner
_ELEMENTWISE = (nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.LeakyReLU, nn.ELU, nn.Mish, nn.Identity)


def resolve_tensor_plan(network: nn.Module, plan: Any, size: int) -> dict[str, str]:
    """The checked plan ``{child path: style}`` for splitting ``network`` over ``size`` ranks.

    ``plan`` is a mapping, ``'auto'``, or ``None`` (the network's own ``tensor_parallel_plan()``).
    """
    if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1:
        raise ValueError(f"Expected 'tensor_parallel' a positive integer (the tp size). Received: {size!r}.")
    if plan is None:
        own = getattr(network, 'tensor_parallel_plan', None)
        if not callable(own):
            raise ValueError(f"Expected a 'tensor_parallel_plan' (a mapping of child paths to styles, or 'auto') or "
                             f"a network with a tensor_parallel_plan() method. Received: none for "
                             f"{type(network).__name__}. Add 'tensor_parallel_plan' to the model config.")
        plan = own()
    if isinstance(plan, str) and plan == 'auto':
        return _auto_plan(network, size)
    if not isinstance(plan, Mapping):
        raise TypeError(f"Expected 'tensor_parallel_plan' a mapping of child paths to {sorted(STYLES)} or 'auto'. "
                        f"Received: {plan!r}.")
    resolved = {}
    for path, style in plan.items():
        _check_entry(network, path, style, size)
        resolved[path] = style
    if not resolved:
        raise ValueError("Expected a 'tensor_parallel_plan' naming at least one child to split. Received: {}.")
    return resolved


def parallel_styles(plan: Mapping[str, str]) -> dict[str, Any]:
    """DTensor's parallel styles for a resolved plan, as ``parallelize_module`` takes them."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel
    makers = {'colwise': ColwiseParallel, 'rowwise': RowwiseParallel, 'sequence': SequenceParallel,
              'vocab': lambda: RowwiseParallel(input_layouts=Replicate())}
    return {path: makers[style]() for path, style in plan.items()}


def _check_entry(network: nn.Module, path: Any, style: Any, size: int) -> None:
    if style not in STYLES:
        raise ValueError(f"Expected a tensor-parallel style among {sorted(STYLES)}. Received: {style!r} for "
                         f"{path!r}.")
    try:
        child = network.get_submodule(path) if isinstance(path, str) and path else None
    except AttributeError:
        child = None
    if child is None:
        children = [name for name, _ in network.named_modules() if name]
        raise ValueError(f"Expected child paths of the network in 'tensor_parallel_plan'. Received: {path!r}; the "
                         f"network's children are {children[:20]}{' ...' if len(children) > 20 else ''}.")
    if not isinstance(child, STYLES[style]):
        raise TypeError(f"Expected {style!r} on {' or '.join(t.__name__ for t in STYLES[style])}. Received: "
                        f"{path!r} is {type(child).__name__}.")
    width = _split_width(child, style)
    if width is not None and width % size:
        raise ValueError(f"Expected {path!r} ({style}) to have a split width that tensor_parallel={size} divides. "
                         f"Received: width {width}. Change the layer's width or 'tensor_parallel'.")


def _split_width(child: nn.Module, style: str) -> int | None:
    if style == 'colwise':
        return child.out_features
    if style == 'rowwise':
        return child.in_features
    if style == 'vocab':
        return child.num_embeddings
    return None


def _auto_plan(network: nn.Module, size: int) -> dict[str, str]:
    plan, reasons = {}, []
    for prefix, container in network.named_modules():
        if isinstance(container, nn.Sequential):
            _pair_chain(container, prefix, size, plan, reasons)
    if not plan:
        found = '; '.join(reasons) or 'the network holds no nn.Sequential with two nn.Linear layers'
        raise ValueError(f"Expected, for tensor_parallel_plan='auto', a chain of nn.Linear layers that can be split "
                         f"colwise then rowwise over tensor_parallel={size}. Received: {found}. Give the plan as a "
                         f"mapping of child paths to styles.")
    return plan


def _pair_chain(container: nn.Sequential, prefix: str, size: int, plan: dict[str, str], reasons: list[str]) -> None:
    pending = None
    for name, child in container.named_children():
        path = f'{prefix}.{name}' if prefix else name
        if isinstance(child, nn.Linear):
            if pending is None:
                if child.out_features % size:
                    reasons.append(f'{path!r} has {child.out_features} output features, not divisible by {size}')
                else:
                    pending = path
                continue
            plan[pending], plan[path] = 'colwise', 'rowwise'
            pending = None
        elif pending is not None and not isinstance(child, _ELEMENTWISE):
            why = ('dropout on a split activation would not draw what one process draws'
                   if isinstance(child, nn.Dropout) else 'it does not act on each entry alone')
            reasons.append(f'{path!r} ({type(child).__name__}) stands after {pending!r}: {why}')
            pending = None


def apply_tensor_parallel(network: nn.Module, plan: Mapping[str, str], ranks: tuple[int, ...]) -> nn.Module:
    """Split ``network``'s planned children over the process group of ``ranks`` (this rank's ``tp`` group) on
    DTensor, in place; each rank keeps its share of the split parameters. Returns ``network``."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.parallel import parallelize_module
    device = next(network.parameters()).device.type
    mesh = DeviceMesh(device, list(ranks), mesh_dim_names=('tp',))
    return parallelize_module(network, mesh, parallel_styles(plan))
