"""What a ``Domain`` refuses, and the description that tells a resumed research from another one.

A product (``*``) or a pairing (``@``) of domains that name one option twice would keep only the right value of it
(``Domain({'a': [1, 2]}) * Domain({'a': [3]})`` is two ``a=3`` configs); an option without values gives no config;
a weight must be a positive finite float (an int looks like a count: ``domain * 3`` repeats nothing); a count of
configs, repetitions or configs repeated at a time is an int ``>= 1``.
"""
from __future__ import annotations

import math
import numbers
import re
from typing import Any

__all__ = ['check_count', 'check_disjoint', 'check_values', 'check_weight', 'describe']

_ADDRESS = re.compile(r' at 0x[0-9a-fA-F]+')


def check_values(name: Any, values: Any) -> None:
    """An option's list of values holds at least one."""
    if len(values) == 0:
        raise ValueError(f"Expected at least one value for option {name!r}. Received: {name!r}: {values!r}, which "
                         "gives no config (the whole product with it would be empty). Give it values, or leave "
                         "the option out.")


def check_weight(weight: Any) -> None:
    """A cube's weight (``0.3 * domain``): a float, finite and ``> 0`` (``nan``: no weight)."""
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise TypeError(f"Expected a Domain or a float weight to multiply a Domain by. Received: {weight!r}.")
    if isinstance(weight, numbers.Integral):
        raise TypeError(f"Expected a Domain, or a float weight for sampling among weighted cubes (0.3 * domain). "
                        f"Received: the int {weight!r}, which reads as a count. To run each config {weight!r} "
                        f"times, pass Research(..., n_reps={weight!r}); for a weight, write it as a float "
                        f"({float(weight)!r}).")
    if not math.isnan(weight) and (math.isinf(weight) or weight <= 0):
        raise ValueError(f"Expected a weight > 0 and finite: a cube's share when cubes are sampled by weight. "
                         f"Received: {weight!r}. Use e.g. 0.3 * domain_a + 0.7 * domain_b.")


def check_disjoint(left: list, right: list, operator: str) -> None:
    """Two cubes joined by ``*`` or ``@`` name no option twice."""
    shared = sorted({name.alias for name, _ in left} & {name.alias for name, _ in right})
    if shared:
        raise ValueError(f"Expected domains with different options on each side of {operator!r}. Received: "
                         f"{shared} on both sides: each config would keep the right side's value only. Join the "
                         f"values in one option (Domain({{{shared[0]!r}: [...all values...]}})), or chain the "
                         "domains with '+'.")


def check_count(name: str, value: Any, none: bool = False) -> Any:
    """``value`` as an int ``>= 1`` (or ``None`` where ``none``)."""
    if value is None and none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"Expected {name} as an int >= 1{' or None' if none else ''}. Received: {name}={value!r}. "
                         f"{'Leave it None for the default, or pass' if none else 'Pass'} a positive count.")
    return int(value)


def describe(domain: Any) -> str:
    """The domain as text that is the same for the same options, values, samplers and weights in any process:
    one line per cube, ``weight: name=[values] * name=Sampler(...)``."""
    from ..sampler import Sampler
    lines = []
    for cube, weight in zip(domain.cubes, domain.weights):
        options = [f'{name.alias}=' + (_text(values) if isinstance(values, Sampler) else
                                       '[' + ', '.join(_ADDRESS.sub('', value.alias) for value in values) + ']')
                   for name, values in cube]
        lines.append(f"{'-' if math.isnan(weight) else repr(float(weight))}: {' * '.join(options)}")
    return '\n'.join(lines) + '\n'


def _text(value: Any) -> str:
    """A sampler, or anything it holds, as text without memory addresses or generator states."""
    from ..sampler import Sampler
    if isinstance(value, Sampler):
        items = sorted((key, item) for key, item in vars(value).items() if key != 'state')
        return f"{type(value).__name__}({', '.join(f'{key}={_text(item)}' for key, item in items)})"
    if isinstance(value, (list, tuple)):
        return '[' + ', '.join(_text(item) for item in value) + ']'
    if isinstance(value, dict):
        return '{' + ', '.join(f'{key!r}: {_text(item)}' for key, item in sorted(value.items())) + '}'
    if callable(value):
        return getattr(value, '__qualname__', None) or type(value).__name__
    return _ADDRESS.sub('', repr(value))
