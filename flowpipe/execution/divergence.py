"""Where a layout diverges: ``verify``'s replays under hooks on every module, and the first module whose
activations or gradients differ from one process's.

While a :class:`Recorder` is entered, torch's global module hooks see every module call in the process. A call
made with no module call around it in its thread is a *root call* (a network's forward on one piece, a loss
module's): it keeps its first tensor argument (the piece's rows) and, for every module called inside it (the
root included), the output and the gradient that reaches the module's input, both on the piece's items, by the
module's name in the root and its call count (a module called twice is two keys); a wrapper of one network
(``DistributedDataParallel``, a compiled module) is passed over, its network the root. Replicas' copies of a
network name their modules as the network does, so the pieces of any layout (replicas, micro-batches, ranks) are placed
back on their items by their rows: the reference replays in one process on one device, one root call a batch,
and every piece of the other layout is found among its rows (:func:`first_divergence`).

The comparison goes through the reference's root calls in the order they ran. In the first call where anything
differs beyond the tolerance (largest absolute difference over the reference's largest magnitude), the result
names the first module whose output differs, in the order the modules finished their forwards (a container
after its children, so the layer that differs is named, not the block holding it); when every output agrees,
the first module whose input gradient differs in the order of backward (the reverse of the calls), which is where
the gradient first changes. The hooks hold copies of every activation of the replayed steps: they run only to
explain a deviation.
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ['Divergence', 'Recorder', 'first_divergence']


@dataclass
class RootCall:
    """One root call: its class, rows, and per ``(module name, call)`` key the outputs and input gradients."""

    root: str
    rows: torch.Tensor
    finished: list = field(default_factory=list)       # keys in the order their forwards ended
    called: list = field(default_factory=list)          # keys in the order their forwards began
    outputs: dict = field(default_factory=dict)
    grads: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to('cpu', torch.float64, copy=True)


def _items(value: Any, rows: int) -> torch.Tensor | None:
    """The first tensor in ``value`` (a tensor, or a tuple or list holding tensors) whose first axis is ``rows``."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    for item in values:
        if isinstance(item, torch.Tensor) and item.dim() and item.shape[0] == rows and item.is_floating_point():
            return item
    return None


_WRAPPER = object()      # the stack's mark of a wrapper's call (DDP, a compiled module): its one child is the root


def _wraps(module: torch.nn.Module) -> bool:
    """Whether ``module`` only wraps one network (``DistributedDataParallel``'s ``module``, a compiled module's
    ``_orig_mod``), which is then the root named: the wrapper adds a prefix to every name."""
    children = list(module.children())
    return len(children) == 1 and any(getattr(module, name, None) is children[0] for name in ('module', '_orig_mod'))


class Recorder:
    """``with Recorder() as recorder:`` every root call in the block, in ``recorder.calls``."""

    def __init__(self) -> None:
        self.calls: list[RootCall] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._names: dict[int, tuple[torch.nn.Module, dict[int, str]]] = {}
        self._handles: list[Any] = []

    def __enter__(self) -> Recorder:
        module = torch.nn.modules.module
        self._handles = [module.register_module_forward_pre_hook(self._begin),
                         module.register_module_forward_hook(self._end)]
        return self

    def __exit__(self, *exc_info: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _stack(self) -> list:
        return self._local.__dict__.setdefault('stack', [])

    def _name(self, root: torch.nn.Module, module: torch.nn.Module) -> str:
        known = self._names.get(id(root))
        if known is None or known[0] is not root:
            known = (root, {id(sub): name for name, sub in root.named_modules()})
            self._names[id(root)] = known
        return known[1].get(id(module), f'<{type(module).__name__}>')

    def _begin(self, module: torch.nn.Module, args: tuple) -> None:
        stack = self._stack()
        owner = next((entry for entry in stack if entry[0] is not _WRAPPER), None)
        if owner is not None:
            root, call = owner[0], owner[1]
        elif _wraps(module):
            stack.append((_WRAPPER, None, None))
            return
        else:
            root, rows = module, next((a for a in args if isinstance(a, torch.Tensor) and a.dim()), None)
            call = None if rows is None else RootCall(type(module).__qualname__, rows.detach().to('cpu', copy=True))
            if call is not None:
                with self._lock:
                    self.calls.append(call)
        key = None
        if call is not None:
            name = self._name(root, module)
            count = call.counts[name] = call.counts.get(name, -1) + 1
            key = (name, count, type(module).__name__)
            call.called.append(key)
            inputs = _items(args, call.rows.shape[0])
            if inputs is not None and inputs.requires_grad:
                inputs.register_hook(functools.partial(self._gradient, call, key))
        stack.append((root, call, key))

    @staticmethod
    def _gradient(call: RootCall, key: tuple, grad: torch.Tensor) -> None:
        call.grads[key] = _copy(grad)

    def _end(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        stack = self._stack()
        if not stack:
            return
        _, call, key = stack.pop()
        if key is not None:
            call.finished.append(key)
            value = _items(output, call.rows.shape[0])
            if value is not None:
                call.outputs[key] = _copy(value)


@dataclass(frozen=True)
class Divergence:
    """The first place a layout's replay differs from one process's."""

    root: str            #: the class of the root module (the network, or the loss module)
    forward: int         #: which forward of that root in the replay (from 1): the step, for a training run
    what: str            #: ``'activations'`` or ``'gradients'``
    module: str          #: the module's name in the root (``''``: the root itself)
    kind: str            #: the module's class
    difference: float    #: the largest absolute difference over the reference's largest magnitude

    def __str__(self) -> str:
        name = repr(self.module) if self.module else '(the whole network)'
        return (f"the {self.what} of module {name} ({self.kind}) in forward {self.forward} of {self.root}: relative "
                f"difference {self.difference:.3g}")


def _rows(tensor: torch.Tensor) -> list[bytes]:
    flat = tensor.reshape(tensor.shape[0], -1).contiguous().numpy()
    return [row.tobytes() for row in flat]


def _placed(reference: list[RootCall], other: list[RootCall]) -> dict[int, list[tuple[RootCall, list[int]]]]:
    """For each reference call, the other layout's calls found among its rows, with the rows' positions."""
    where: dict[tuple[str, bytes], list[tuple[int, int]]] = {}
    for number, call in enumerate(reference):
        for position, row in enumerate(_rows(call.rows)):
            where.setdefault((call.root, row), []).append((number, position))
    placed: dict[int, list] = {}
    for call in other:
        rows = _rows(call.rows)
        if not rows:
            continue
        first = where.get((call.root, rows[0]))
        if not first:
            continue
        number = first[0][0]
        positions = []
        for row in rows:
            free = [spot for spot in where.get((call.root, row), ()) if spot[0] == number]
            if not free:
                break
            where[(call.root, row)].remove(free[0])
            positions.append(free[0][1])
        if len(positions) == len(rows):
            placed.setdefault(number, []).append((call, positions))
    return placed


def _difference(want: torch.Tensor, parts: list[tuple[torch.Tensor | None, list[int]]]) -> float:
    got = torch.full_like(want, float('nan'))
    for value, positions in parts:
        if value is None or value.shape[1:] != want.shape[1:]:
            return float('inf')
        got[positions] = value
    scale = float(want.abs().max()) if want.numel() else 0.0
    error = float((got - want).abs().max()) if want.numel() else 0.0
    return float('inf') if error != error else error / (scale or 1.0)


def first_divergence(reference: list[RootCall], other: list[RootCall], tolerance: float) -> Divergence | None:
    """The first module whose activations or gradients differ by more than ``tolerance`` (see the module
    docstring); ``None`` when none does, or when no call of ``other`` lies on the reference's rows."""
    placed = _placed(reference, other)
    forwards: dict[str, int] = {}
    for number, call in enumerate(reference):
        forwards[call.root] = forwards.get(call.root, 0) + 1
        pieces = placed.get(number)
        if not pieces or sum(len(positions) for _, positions in pieces) != call.rows.shape[0]:
            continue
        for what, keys, store in (('activations', call.finished, 'outputs'),
                                  ('gradients', call.called[::-1], 'grads')):
            for key in keys:
                want = getattr(call, store).get(key)
                if want is None:
                    continue
                difference = _difference(want, [(getattr(piece, store).get(key), positions)
                                                 for piece, positions in pieces])
                if not difference <= tolerance:
                    return Divergence(call.root, forwards[call.root], what, key[0], key[2], difference)
    return None
