"""A model config's network sections (batchflow's ``initial_block``, ``body``, ``head``, ``order``, ``common``)
made into a network: ``TorchModel`` calls ``network_from_sections``.

- A model class without a ready network (``TorchModel`` itself, the zoo's classes) builds a ``Network`` of the
  sections named by ``order``, every part reading its sizes from the input's shape.
- A ready network's class (``MLP``, ``SimpleCNN``, ``VGG7``, ``ResNet``...) builds its own network from its
  options (``network_options``); a section given as parameters its class does not read (a ``layout``...) makes
  that part instead, as a ``Network`` part on the output of the parts before it: ``'head/layout': 'Vf'`` gives a
  ``ResNet`` another head. The parts after a replaced one must be replaced too (their sizes come from it).
- A layout head's ``channels`` and ``features`` default to the number of outputs (the classes of the first
  target, or the first axis of its shape), as in batchflow.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch import nn

from .blocks.network import DEFAULT_ORDER, Network, make_part
from .config import ModelSpec
from .layers.shapes import run_example

__all__ = ['READY_PARTS', 'has_sections', 'network_from_sections', 'replaced_parts', 'section_params']

#: the parts of a ready network, in order
READY_PARTS = DEFAULT_ORDER
#: section keys the model itself reads (not a part's parameters)
_MODEL_KEYS = ('inputs',)


def section_params(spec: ModelSpec, name: str) -> Any:
    """A section's parameters without the keys the model reads (``initial_block/inputs``) and those set to
    ``None`` (which set nothing)."""
    value = spec.get(name)
    if isinstance(value, Mapping):
        return {key: item for key, item in value.items() if key not in _MODEL_KEYS and item is not None}
    return value


def has_sections(spec: ModelSpec) -> bool:
    """Whether the config describes a network by its sections (a part with parameters, or an ``nn.Module``)."""
    return any(section_params(spec, name) for name in _order(spec))


def _order(spec: ModelSpec) -> tuple[str, ...]:
    order = spec.get('order') or DEFAULT_ORDER
    return tuple(order) if not isinstance(order, str) else (order,)


def replaced_parts(spec: ModelSpec, network_options: Mapping[str, str]) -> list[str]:
    """The parts of a ready network that its sections replace: a section with parameters none of which the class
    reads, or an ``nn.Module``; a section that mixes both is a ``ValueError``."""
    replaced = []
    for name in READY_PARTS:
        params = section_params(spec, name)
        if not params:
            continue
        if isinstance(params, nn.Module):
            replaced.append(name)
            continue
        read = [key for key in params if f'{name}/{key}' in network_options]
        if read and len(read) < len(params):
            other = sorted(set(params) - set(read))
            raise ValueError(f"Expected the section {name!r} either with the options its class reads ({read}) or "
                             f"as the parameters of a new part. Received: both, and {other}. Drop one kind.")
        if not read:
            replaced.append(name)
    for later in READY_PARTS[READY_PARTS.index(replaced[0]) + 1:] if replaced else ():
        if later not in replaced:
            raise ValueError(f"Expected the parts after a replaced {replaced[0]!r} replaced too: their sizes come "
                             f"from it. Received: no parameters of a new {later!r}. Give its section a layout "
                             f"(e.g. '{later}/layout').")
    return replaced


def network_from_sections(spec: ModelSpec, factory: Callable[..., nn.Module] | None,
                          network_options: Mapping[str, str] | None = None) -> nn.Module:
    """The network of a config: a ``Network`` of its sections, or the ready network of ``factory`` (made with the
    options its class reads, ``network_options``: config path -> keyword) with the parts its sections replace."""
    example = torch.zeros((1, *spec.input_shape))
    sections = {name: _with_outputs(spec, name, section_params(spec, name)) for name in _order(spec)}
    common = spec.get('common') or {}
    if factory is None:
        return Network(example, {**sections, 'order': list(_order(spec)), 'common': common})
    network_options = network_options or {}
    replaced = replaced_parts(spec, network_options)
    options = {keyword: spec.get(path) for path, keyword in network_options.items() if spec.get(path) is not None}
    network = factory(spec.input_shape, spec.num_outputs, **options)
    x: Any = example
    for name in READY_PARTS:
        if name in replaced:
            section = sections[name]
            if isinstance(section, Mapping):
                section = {**common, **section}
            setattr(network, name, make_part(x, section, name))
        x = run_example(getattr(network, name), x)
    return network


def _with_outputs(spec: ModelSpec, name: str, params: Any) -> Any:
    """The head's ``channels`` and ``features`` set to the number of outputs where the section leaves them: the
    classes of the first target, else the first axis of its shape (batchflow's: a ``(3, 64, 64)`` mask gives 3)."""
    if name != 'head' or not isinstance(params, Mapping) or not params or not spec.target_names:
        return params
    first = spec.target_names[0]
    outputs = spec.classes.get(first) or (spec.shapes[first][0] if spec.shapes.get(first) else None)
    return params if outputs is None else {'channels': outputs, 'features': outputs, **params}
