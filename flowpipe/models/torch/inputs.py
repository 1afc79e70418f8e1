"""Turning a step's arguments into tensors and its outputs into fetched numpy values."""
from __future__ import annotations

import difflib
from typing import Any, Callable

import torch

__all__ = ['DEFAULT_INPUT', 'FETCHES', 'as_list', 'by_name', 'check_fetches', 'fetch_value', 'pick_fetches', 'require',
           'to_numpy']

FETCHES = ('loss', 'predictions', 'proba', 'labels')

#: The name of the network input when the config declares none (batchflow's ``images``).
DEFAULT_INPUT = 'images'


def by_name(args: tuple, named: dict, input_names: tuple, target_names: tuple) -> dict:
    order = (*input_names, *target_names)
    if order and len(args) > len(order):
        raise ValueError(f"Expected at most {len(order)} positional inputs {list(order)}. "
                         f"Received: {len(args)}. Pass the extra ones by name.")
    values = dict(zip(order or (DEFAULT_INPUT, *[f'target{i}' for i in range(len(args) - 1)]), args))
    for name, value in named.items():
        if order and name not in order:
            close = difflib.get_close_matches(name, order, n=2)
            hint = f" Did you mean {close}?" if close else ''
            raise ValueError(f"Expected inputs named in the model config {list(order)}. Received: {name!r}."
                             f"{hint} Declare it as 'inputs/{name}/shape' or rename it.")
        if not order:
            raise ValueError(f"Expected positional inputs or inputs=/targets=: the model config declares no "
                             f"inputs. Received: {name!r}=... . Add 'inputs/{name}/...' to the config.")
        values[name] = value
    return values


def require(names: tuple, values: dict, what: str, keyword: str) -> None:
    if any(name not in values for name in names):
        raise ValueError(f"Expected {what} {list(names)!r}. Received: {sorted(values)!r}. "
                         f"Pass them by name, positionally or as {keyword}.")


def as_list(value: Any) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def fetch_value(name: str, loss: Callable[[], float], outputs: Any) -> Any:
    if name == 'loss':
        return loss()
    if not isinstance(outputs, torch.Tensor):
        if name == 'predictions':
            return to_numpy(outputs)
        raise TypeError(f"Expected one output tensor to compute {name!r}. Received: {type(outputs).__name__}. "
                        "Fetch 'predictions' instead.")
    if name == 'predictions':
        return to_numpy(outputs)
    if name == 'proba':
        return to_numpy(torch.softmax(outputs.float() if outputs.dtype in (torch.float16, torch.bfloat16)
                                       else outputs, dim=1))
    return to_numpy(outputs.argmax(dim=1))


def to_numpy(outputs: Any) -> Any:
    if isinstance(outputs, torch.Tensor):
        tensor = outputs.detach()
        if tensor.dtype in (torch.float16, torch.bfloat16):
            tensor = tensor.float()
        return tensor.cpu().numpy()
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(to_numpy(item) for item in outputs)
    if isinstance(outputs, dict):
        return {key: to_numpy(value) for key, value in outputs.items()}
    return outputs


def pick_fetches(fetches: Any, outputs: Any, default: Any = None) -> Any:
    """``fetches`` or batchflow's ``outputs`` (not both), else ``default``."""
    if fetches is not None and outputs is not None:
        raise ValueError(f"Expected fetches= or outputs= (the same option), not both. Received: fetches={fetches!r}, "
                         f"outputs={outputs!r}.")
    chosen = fetches if fetches is not None else outputs
    return default if chosen is None else chosen


def check_fetches(fetches: Any) -> list[str]:
    """The fetch names as a list; a ``ValueError`` naming close matches for an unknown one."""
    if fetches is None:
        return []
    names = [fetches] if isinstance(fetches, str) else list(fetches)
    for name in names:
        if name not in FETCHES:
            close = difflib.get_close_matches(str(name), FETCHES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ''
            raise ValueError(f"Expected fetches among {list(FETCHES)}. Received: {name!r}.{hint}")
    return names
