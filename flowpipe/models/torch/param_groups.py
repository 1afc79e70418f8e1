"""Parameter groups of the ``optimizer`` key: options per group of parameters chosen by name, and weight decay
kept off biases and norms (nanoGPT's ``configure_optimizers``).

Two keys of the optimizer dict are read here (the others are the optimizer's options, every group's default):

- ``groups``: a list of dicts, each with ``params`` (a glob pattern or a list of them, matched against the
  parameters' qualified names as ``named_parameters`` gives them, ``'encoder.*'``; or a callable
  ``(name, parameter) -> bool``) and the group's own options (``{'params': 'head.*', 'lr': 1e-2}``). A parameter
  goes to the first group that takes it; those no group takes form a last group with the defaults.
- ``no_decay``: which parameters get no weight decay: ``'auto'`` those with fewer than 2 dimensions (biases,
  LayerNorm and BatchNorm weights; embeddings and linear weights decay), a pattern or a list of them, or a
  callable ``(name, parameter) -> bool``. Each group is then split in two, the decayed part first, the other with
  ``weight_decay`` 0. Without ``no_decay`` every parameter decays as torch's optimizer decays it (a config written
  before keeps its meaning).

Parameters that do not require gradients are left out once ``groups`` or ``no_decay`` is given (as nanoGPT does);
tied parameters (one tensor under two names) appear once, under the first name. Groups left empty are dropped.
"""
from __future__ import annotations

import fnmatch
from typing import Any, Callable, Iterable

import torch

__all__ = ['GROUP_KEYS', 'parameter_groups']

#: the optimizer dict's keys this module reads
GROUP_KEYS = ('groups', 'no_decay')


def _rule(value: Any, what: str) -> Callable[[str, torch.Tensor], bool]:
    """A ``(name, parameter) -> bool`` from a pattern, a list of patterns or a callable."""
    if callable(value):
        return value
    patterns = [value] if isinstance(value, str) else value
    if not isinstance(patterns, (list, tuple)) or not all(isinstance(item, str) for item in patterns):
        raise TypeError(f"Expected {what} as a glob pattern of parameter names, a list of them or a callable "
                        f"(name, parameter) -> bool. Received: {value!r}")
    return lambda name, _: any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _no_decay_rule(value: Any) -> Callable[[str, torch.Tensor], bool]:
    if value == 'auto':
        return lambda _, parameter: parameter.dim() < 2
    return _rule(value, "optimizer 'no_decay'")


def parameter_groups(named: Iterable[tuple[str, torch.Tensor]], groups: Any = None,
                     no_decay: Any = None) -> list[dict]:
    """torch's ``param_groups`` argument for ``named`` parameters (see the module docstring).

    Raises:
        TypeError: a group that is not a dict with ``params``, or a rule of another type.
        ValueError: a group whose ``params`` match no parameter (most likely a typo in a name).
    """
    named = [(name, parameter) for name, parameter in named if parameter.requires_grad]
    specs = list(groups or [])
    chosen: list[list[tuple[str, torch.Tensor]]] = [[] for _ in specs] + [[]]
    rules = []
    for number, spec in enumerate(specs):
        if not isinstance(spec, dict) or 'params' not in spec:
            raise TypeError(f"Expected each optimizer group as a dict with 'params' (names or a rule) and its "
                            f"options. Received: groups[{number}]={spec!r}")
        rules.append(_rule(spec['params'], f"optimizer groups[{number}]['params']"))
    for name, parameter in named:
        place = next((number for number, rule in enumerate(rules) if rule(name, parameter)), len(specs))
        chosen[place].append((name, parameter))
    empty = [number for number in range(len(specs)) if not chosen[number]]
    if empty:
        raise ValueError(f"Expected every optimizer group to take some parameters. Received: groups "
                         f"{[specs[number]['params'] for number in empty]!r} match none of "
                         f"{[name for name, _ in named][:8]}...; check the names (model.model.named_parameters())")
    options = [{key: value for key, value in spec.items() if key != 'params'} for spec in specs] + [{}]
    result = []
    skip = None if no_decay is None else _no_decay_rule(no_decay)
    for members, extra in zip(chosen, options):
        if skip is None:
            parts = [(members, extra)]
        else:
            parts = [([(n, p) for n, p in members if not skip(n, p)], extra),
                     ([(n, p) for n, p in members if skip(n, p)], {**extra, 'weight_decay': 0.0})]
        result.extend({'params': [p for _, p in part], **more} for part, more in parts if part)
    return result
