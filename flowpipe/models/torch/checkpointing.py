"""Activation checkpointing: the model config key ``'checkpoint_activations'``.

A checkpointed module keeps only its inputs for backward; backward runs its forward again (``torch.utils.checkpoint``,
``use_reentrant=False``) to get the activations it needs. The key names the modules: a list of top-level child
names of the network (``['body', 'head']``) or dotted names of deeper modules (``'body.0'``), ``True`` for every
top-level child that holds parameters (one without any, an activation or a dropout layer, keeps as much checkpointed
as not: its input instead of what it saves), ``None`` / ``False`` / ``[]`` for none.

Exact: the recomputation gives the first forward's values bit for bit, so the losses, gradients and parameters are
those of the step without checkpointing.

- Random layers draw the same numbers again: the generators the first forward drew from are set back to the
  states it started from for the recomputation (``flowpipe.parallel.randomness.ForwardGenerators``, under the
  generator locks of the pieces, as torch's ``preserve_rng_state`` does without them), and dropout drawn by item
  (``'randomness': 'by_item'``) replays the draws the first forward made (``flowpipe.parallel.item_random.DrawLog``)
  instead of counting new calls.
- Buffers the forward changes (BatchNorm's running statistics in training mode: their version counters move)
  change once: the recomputation copies those, and only those, and puts them back.
- Without gradients (``predict``, evaluation) the module's forward runs as it is.

The wrapping is the instance attribute ``forward`` of each named module (parameter names, ``state_dict`` keys and the
repr stay the network's); a saved network carries none (``remove_checkpointing``): the config key wraps it again
when it loads.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _NormBase     # BatchNorm's and InstanceNorm's base: the running statistics
from torch.utils.checkpoint import checkpoint

from ...parallel.item_calls import replaying_calls
from ...parallel.item_random import DrawLog, dropout_modules
from ...parallel.randomness import ForwardGenerators

__all__ = ['CheckpointedForward', 'apply_checkpointing', 'checkpointed_names', 'describe_checkpointing',
           'remove_checkpointing']

KEY = 'checkpoint_activations'


class CheckpointedForward:
    """A module's forward that recomputes its activations in backward (set as the module's ``forward``).

    Args:
        module: the checkpointed module.
        inner: a forward the module had on its instance before, else ``None`` (its class's).
    """

    def __init__(self, module: nn.Module, inner: Any = None):
        self.module, self.inner = module, inner

    def _forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs) if self.inner is not None else type(self.module).forward(
            self.module, *args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self._forward(*args, **kwargs)
        devices = {arg.device for arg in args if isinstance(arg, torch.Tensor)}
        # the generators are flowpipe's to restore (ForwardGenerators): torch's own restoring would set the CPU
        # generator from autograd's device thread without the lock the CPU replicas' pieces hold
        return checkpoint(self._forward, *args, use_reentrant=False, preserve_rng_state=False,
                          context_fn=lambda: _contexts(self.module, devices), **kwargs)


def _contexts(module: nn.Module, devices: set[torch.device]) -> tuple[Any, Any]:
    first = _FirstForward(module, devices)
    return first, _Recompute(first)


class _FirstForward:
    """The context of a checkpointed module's forward: it records the dropout draws (``DrawLog``), the states of
    the generators it starts from and which buffers it changes: the running statistics of its normalization
    layers in training mode (BatchNorm, InstanceNorm with ``track_running_stats``; torch's kernels update them
    without moving their version counters) and any other buffer whose version counter moves (an in-place update
    in a user's forward)."""

    def __init__(self, module: nn.Module, devices: set[torch.device]):
        self.module, self.devices, self.log = module, devices, DrawLog()
        self.generators: ForwardGenerators | None = None
        self.versions: list[tuple[torch.Tensor, int]] = []
        self.changed: list[torch.Tensor] = []
        self.recording: Any = None

    def __enter__(self) -> None:
        self.versions = [(buffer, buffer._version) for buffer in self.module.buffers()]
        self.changed = [buffer for layer in self.module.modules() if isinstance(layer, _NormBase) and layer.training
                        and layer.track_running_stats for buffer in layer.buffers(recurse=False)]
        self.generators = ForwardGenerators(self.devices)
        self.recording = self.log.recording()
        self.recording.__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        self.recording.__exit__(*exc_info)
        self.generators.finish()
        known = {id(buffer) for buffer in self.changed}
        self.changed += [buffer for buffer, version in self.versions
                         if buffer._version != version and id(buffer) not in known]
        self.versions = []


class _Recompute:
    """The context of a recomputation: the generators start where the first forward's did, dropout replays its
    draws, and the buffers it changed are put back on exit (copied first: only those)."""

    def __init__(self, first: _FirstForward):
        self.first = first
        self.saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.contexts = contextlib.ExitStack()

    def __enter__(self) -> None:
        self.saved = [(buffer, buffer.detach().clone()) for buffer in self.first.changed]
        self.contexts = contextlib.ExitStack()
        self.contexts.enter_context(self.first.generators.replaying())
        self.contexts.enter_context(self.first.log.replaying())
        if any(draw is not None for draw in self.first.log.draws):  # random calls too: their mode, on this thread
            self.contexts.enter_context(replaying_calls())

    def __exit__(self, *exc_info: Any) -> None:
        self.contexts.__exit__(*exc_info)
        with torch.no_grad():
            for buffer, value in self.saved:
                buffer.copy_(value)
        self.saved = []


def checkpointed_names(network: nn.Module, value: Any) -> tuple[str, ...]:
    """The qualified names of the modules ``value`` (the config's ``'checkpoint_activations'``) checkpoints.

    Raises:
        TypeError: a value that is not ``True``, ``False``, ``None``, a name or a list of names.
        ValueError: a name that is not a module of the network (the message lists the top-level children), the
            network itself, a dropout module, or a module named together with one that holds it.
    """
    if value is None or value is False:
        return ()
    if value is True:
        return tuple(name for name, child in network.named_children() if any(True for _ in child.parameters()))
    names = (value,) if isinstance(value, str) else value
    if not isinstance(names, Sequence) or not all(isinstance(name, str) for name in names):
        raise TypeError(f"Expected '{KEY}' as True (every top-level child holding parameters), a list of module names "
                        f"or None. Received: {KEY}={value!r} of type {type(value).__name__}. Write e.g. "
                        f"'{KEY}': ['body', 'head'].")
    for name in names:
        _check_name(network, name)
    _check_disjoint(names)
    return tuple(names)


def _check_name(network: nn.Module, name: str) -> None:
    children = [child for child, _ in network.named_children()]
    fix = (f"Name top-level children of the network ({children}) or modules under them with dots ('body.0'), "
           f"or write '{KEY}': True for every top-level child.")
    if not name:
        raise ValueError(f"Expected module names under the network in '{KEY}'. Received: '' (the network itself, "
                         f"whose activations would all be recomputed). {fix}")
    try:
        module = network.get_submodule(name)
    except AttributeError:
        raise ValueError(f"Expected names of modules of the network in '{KEY}'. Received: {name!r}, which "
                         f"{type(network).__name__} does not have. {fix}") from None
    if any(qualified == '' for qualified, _, _ in dropout_modules(module)):
        raise ValueError(f"Expected modules that compute in '{KEY}'. Received: {name!r}, a dropout module: "
                         f"checkpointed alone it keeps its input instead of its mask, no less memory. Name the "
                         f"module that holds it.")


def _check_disjoint(names: Sequence[str]) -> None:
    for i, name in enumerate(names):
        for other in names[i + 1:]:
            if name == other or other.startswith(name + '.') or name.startswith(other + '.'):
                raise ValueError(f"Expected modules in '{KEY}' that do not hold one another. Received: {name!r} and "
                                 f"{other!r}. Name the outer one (its recomputation runs the inner one) or the inner "
                                 f"ones.")


def remove_checkpointing(network: nn.Module) -> nn.Module:
    """Take the checkpointed forwards off ``network``'s modules (in place); returns ``network``."""
    for module in network.modules():
        wrapped = vars(module).get('forward')
        if isinstance(wrapped, CheckpointedForward):
            if wrapped.inner is None:
                del module.forward
            else:
                module.forward = wrapped.inner
    return network


def apply_checkpointing(network: nn.Module, value: Any, compile: Any = None) -> tuple[str, ...]:  # noqa: A002
    """Checkpoint the modules of ``network`` that ``value`` names (``checkpointed_names``), replacing an earlier
    wrapping (a network given to several models follows the last one's config); returns their names."""
    names = checkpointed_names(network, value)
    if names and compile not in (None, False):
        raise ValueError(f"Expected '{KEY}' without 'compile'. Received: {KEY}={value!r} and compile={compile!r}. "
                         f"Drop one of them, or checkpoint inside your own forward with torch.utils.checkpoint.")
    remove_checkpointing(network)
    for name in names:
        module = network.get_submodule(name)
        module.forward = CheckpointedForward(module, vars(module).get('forward'))
    return names


def describe_checkpointing(names: Sequence[str] | None, value: Any = None) -> list[str]:
    """The device plan's line about checkpointing: the modules' names once the network is built, else the value."""
    if names is None:
        return [] if value in (None, False, [], ()) else [f"  checkpoint_activations {value!r}: resolved when the "
                                                          "network is built"]
    if not names:
        return []
    return [f"  activations checkpointed: {', '.join(names)} (their inputs kept, the rest recomputed in backward; "
            f"exact)"]

