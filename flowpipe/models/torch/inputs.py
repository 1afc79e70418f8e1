"""Turning a step's arguments into tensors and its outputs into fetched numpy values."""
from __future__ import annotations

import difflib
from typing import Any, Callable

import torch

__all__ = ['DEFAULT_INPUT', 'FETCHES', 'OUTPUTS', 'as_list', 'by_name', 'check_fetches', 'check_output', 'fetch_value',
           'pick_fetches', 'require', 'to_numpy']


def _float(outputs: torch.Tensor) -> torch.Tensor:
    return outputs.float() if outputs.dtype in (torch.float16, torch.bfloat16) else outputs


#: batchflow's output operations on the network's one output tensor (fetch them by name in train and predict).
OUTPUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    'proba': lambda outputs: torch.softmax(_float(outputs), dim=1),
    'softmax': lambda outputs: torch.softmax(_float(outputs), dim=1),
    'labels': lambda outputs: outputs.argmax(dim=1),
    'sigmoid': lambda outputs: torch.sigmoid(_float(outputs)),
    'softplus': lambda outputs: torch.nn.functional.softplus(_float(outputs)),
    'sigmoid_uint8': lambda outputs: (torch.sigmoid(_float(outputs)) * 255).to(torch.uint8),
    'sigmoid_int16': lambda outputs: (torch.sigmoid(_float(outputs)) * 255).to(torch.int16),
}
FETCHES = ('loss', 'predictions', *OUTPUTS)

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
    return to_numpy(OUTPUTS[name](outputs))


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


def check_output(value: Any) -> tuple[str, ...]:
    """batchflow's ``output`` config key: the names of the outputs a model offers besides ``'predictions'`` (a
    name or a list of names in ``OUTPUTS``); ``()`` for ``None``."""
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise TypeError(f"Expected 'output' as a name or a list of names among {list(OUTPUTS)}. "
                        f"Received: output={value!r}.")
    for name in names:
        if name not in OUTPUTS:
            close = difflib.get_close_matches(name, OUTPUTS, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ''
            raise ValueError(f"Expected 'output' names among {list(OUTPUTS)}. Received: {name!r}.{hint} "
                             "Fetch other values with a callable on 'predictions'.")
    return tuple(names)
