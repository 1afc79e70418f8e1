"""Resolve the ``optimizer`` key of a model config, and the name/class/dict forms it shares with ``decay``.

``optimizer``: a ``torch.optim`` class name (``'Adam'``, ``'sgd'``; case-insensitive), a dict
``{'name': 'SGD', 'lr': 0.1, ...}``, an optimizer class, or a callable ``params -> Optimizer``. Default: Adam.
The dict's ``groups`` and ``no_decay`` give parameter groups by name (``flowpipe.models.torch.param_groups``).
``decay`` is resolved by ``flowpipe.models.torch.decay`` with the helpers here.
"""
from __future__ import annotations

import difflib
import inspect
from collections.abc import Mapping
from typing import Any, Iterable

import torch

from .param_groups import GROUP_KEYS, parameter_groups

__all__ = ['construct', 'find_class', 'make_optimizer', 'split_spec']

def split_spec(spec: Any, what: str) -> tuple[Any, dict]:
    """``(name or class, kwargs)`` of a spec: a dict's ``name`` and its other items, or the spec itself and ``{}``."""
    if not isinstance(spec, Mapping):
        return spec, {}
    if 'name' not in spec:
        raise ValueError(f"Expected a 'name' in the {what} dict. Received: {what}={dict(spec)!r}. "
                         f"Add e.g. 'name': {'SGD' if what == 'optimizer' else 'exp'!r}.")
    return spec['name'], {key: value for key, value in spec.items() if key != 'name'}


def find_class(name: str, namespace: dict, base: type, what: str, aliases: Mapping | None = None) -> type:
    """The subclass of ``base`` in ``namespace`` named ``name`` (any case, or an alias); else close names."""
    known = {key.lower(): cls for key, cls in namespace.items()
             if isinstance(cls, type) and issubclass(cls, base) and cls is not base and not key.startswith('_')}
    key = (aliases or {}).get(name.lower(), name).lower()
    if key in known:
        return known[key]
    names = sorted({cls.__name__ for cls in known.values()} | set(aliases or {}))
    hint = f" Did you mean {close}?" if (close := _close_names(name, names)) else f" Known: {names}."
    raise ValueError(f"Expected a {what} name. Received: {what}={name!r}.{hint}")


def _close_names(name: str, names: list[str]) -> list[str]:
    """Names close to ``name`` whatever the case and ``_``/``-`` (``'adam_w'`` and ``'adamW'`` find ``AdamW``)."""
    def plain(text: str) -> str:
        return text.lower().replace('_', '').replace('-', '')
    by_plain = {plain(known): known for known in names}
    close = difflib.get_close_matches(plain(name), list(by_plain), n=3, cutoff=0.5)
    return [by_plain[key] for key in close]


def construct(cls: Any, first: Any, kwargs: dict, what: str, spec: Any) -> Any:
    """``cls(first, **kwargs)``; a class's ``TypeError`` about its arguments says which ones it requires."""
    try:
        return cls(first, **kwargs)
    except TypeError as error:
        if not isinstance(cls, type):
            raise
        parameters = list(inspect.signature(cls).parameters.values())[1:]
        required = [p.name for p in parameters if p.default is p.empty
                    and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        missing = [name for name in required if name not in kwargs]
        accepted = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = [name for name in kwargs if name not in accepted]
        fix = f" Unknown: {unknown}; {cls.__name__} accepts {accepted}." if unknown else ''
        if missing:
            fix += f" Add {missing} to the dict: {what}={ {'name': spec, **kwargs, **dict.fromkeys(missing, '...')} }."
        raise TypeError(f"Expected {what} {spec!r} ({cls.__name__}) with the arguments it requires. Received: "
                        f"{what} options {kwargs!r} ({error}).{fix}") from None


def make_optimizer(spec: Any, params: Iterable[torch.nn.Parameter],
                   named: Iterable[tuple[str, torch.nn.Parameter]] | None = None) -> torch.optim.Optimizer:
    """An optimizer over ``params`` for a config's ``optimizer`` value (``None``: Adam with defaults); ``named``,
    the same parameters with their names, for ``groups`` and ``no_decay``."""
    spec, kwargs = split_spec('Adam' if spec is None else spec, 'optimizer')
    if any(key in kwargs for key in GROUP_KEYS):
        if named is None:
            raise ValueError(f"Expected the parameters' names for optimizer {list(GROUP_KEYS)}. Received: "
                             "parameters without names; pass named=module.named_parameters()")
        grouping = {key: kwargs.pop(key) for key in GROUP_KEYS if key in kwargs}
        params = parameter_groups(named, **grouping)
    name = spec
    if isinstance(spec, str):
        spec = find_class(spec, vars(torch.optim), torch.optim.Optimizer, 'optimizer')
    if not callable(spec):
        raise TypeError(f"Expected an optimizer name, class or callable(params). Received: optimizer={spec!r}.")
    optimizer = construct(spec, params, kwargs, 'optimizer', name)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"Expected the optimizer factory to return a torch.optim.Optimizer. "
                        f"Received: {type(optimizer).__name__}.")
    return optimizer
