"""The placement part of pipeline parallelism: which top-level children of a network this rank holds, the chain
that runs them, and the network's state and optimizer state as one process holds them, gathered from the stages.

The network keeps its structure on every rank: the children of the other stages move to the ``meta`` device (no
memory), so ``state_dict`` keys, parameter order and the model's repr stay those of one process. The state is
gathered (``gather_object`` over the world, rank 0 keeping the stages of the first pipeline) and given back whole on
every rank, each keeping its stage's entries.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping

import torch
import torch.distributed as dist
from torch import nn

from ..mesh import Mesh
from ..sharded_state import skeleton as meta_skeleton
from ..stages import Pipelining, check_parameters, cut
from .placement import Placement

__all__ = ['Chain', 'StagePlacement', 'check_chain']


class Chain(nn.Module):
    """A stage: its children called one after another, the first on the stage's inputs."""

    def __init__(self, children: Mapping[str, nn.Module]):
        super().__init__()
        self.parts = nn.ModuleDict(children)

    def forward(self, *inputs: Any) -> Any:
        parts = iter(self.parts.values())
        outputs = next(parts)(*inputs)
        for part in parts:
            outputs = part(outputs)
        return outputs


class StagePlacement(Placement):
    """This rank's stage of ``network``, cut as ``pipelining`` says, on ``device``: a placement part whose one
    replica is the stage's chain.

    Attributes:
        parts: each stage's children names, in order.
        stage: this rank's stage index (its ``pp`` coordinate on ``mesh``).
        chain: the :class:`Chain` of this stage's children (the modules of ``network`` itself).
    """

    def __init__(self, network: nn.Module, pipelining: Pipelining, mesh: Mesh, device: torch.device):
        self.network, self.mesh = network, mesh
        self.parts = cut(list(network.named_children()), pipelining)
        check_parameters(list(network.named_children()), self.parts)
        self.stage = mesh.coordinate('pp')
        mine = self.parts[self.stage]
        for name, child in network.named_children():
            child.to(device if name in mine else torch.device('meta'))
        self.chain = Chain(OrderedDict((name, network.get_submodule(name)) for name in mine))
        self._prefixes = tuple(f'{name}.' for name in mine)
        super().__init__([self.chain], [device])

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == len(self.parts) - 1

    def owns(self, key: str) -> bool:
        """Whether the ``state_dict`` key ``key`` belongs to this rank's stage."""
        return key.startswith(self._prefixes)

    def _global_indices(self) -> list[int]:
        """The positions of this stage's parameters among the whole network's (one process's order)."""
        mine = {id(param) for param in self.chain.parameters()}
        return [index for index, param in enumerate(self.network.parameters()) if id(param) in mine]

    def _first_pipeline(self, value: Any) -> list[Any]:
        """Every stage's ``value`` on rank 0, from the first pipeline (a collective of every rank); ``[]`` on the
        others."""
        every = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(value, every, dst=0)
        if every is None:
            return []
        return [every[rank] for rank in self.mesh.groups('pp')[0]]

    def state_dict(self) -> dict:
        """The whole network's ``state_dict`` (CPU tensors, keys in one process's order) on rank 0, ``{}`` on the
        others: a collective."""
        keys = list(self.network.state_dict().keys())
        local = {key: value.detach().cpu() for key, value in self.network.state_dict().items() if self.owns(key)}
        merged: dict = {}
        for part in self._first_pipeline(local):
            merged.update(part)
        return {key: merged[key] for key in keys if key in merged}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load the whole network's ``state_dict`` (given on every rank): this rank keeps its stage's entries."""
        self.chain.load_state_dict({f'parts.{key}': value for key, value in state.items() if self.owns(key)})

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        """The whole optimizer state as one process lays it out (parameters numbered over the whole network) on rank
        0, ``{}`` on the others: a collective."""
        numbers = self._global_indices()
        local = optimizer.state_dict()
        state = {numbers[index]: value for index, value in local['state'].items()}
        groups = [{**group, 'params': [numbers[index] for index in group['params']]} for group in local['param_groups']]
        parts = self._first_pipeline((state, groups))
        if not parts:
            return {}
        merged_state: dict = {}
        merged_groups = [{**group, 'params': []} for group in parts[0][1]]
        for part_state, part_groups in parts:
            merged_state.update(part_state)
            for merged, group in zip(merged_groups, part_groups):
                merged['params'].extend(group['params'])
        for group in merged_groups:
            group['params'].sort()
        return {'state': dict(sorted(merged_state.items())), 'param_groups': merged_groups}

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        """Load a whole optimizer state (given on every rank): this rank keeps its stage's parameters' state."""
        local = {number: index for index, number in enumerate(self._global_indices())}
        groups = [{**group, 'params': [local[number] for number in group['params'] if number in local]}
                  for group in state['param_groups']]
        optimizer.load_state_dict({'state': {local[number]: value for number, value in state['state'].items()
                                             if number in local}, 'param_groups': groups})


def check_chain(network: nn.Module, inputs: list[torch.Tensor], dtype: torch.dtype | None = None) -> None:
    """Raise unless ``network``'s ``forward`` calls its top-level children one after another, each once, the first on
    the inputs and each next one on the previous one's output, and returns the last one's output (traced on a
    skeleton whose parameters are on the ``meta`` device: no memory, no arithmetic); floating ``inputs`` as
    ``dtype``, and two items at least (in training mode a batch norm refuses one value per channel).

    Raises:
        ValueError: naming the first child that breaks the chain.
    """
    skeleton = meta_skeleton(network).to('meta')
    children = list(skeleton.named_children())
    calls: list[tuple[str, Any, Any]] = []
    hooks = [child.register_forward_hook(lambda module, args, output, name=name: calls.append((name, args, output)))
             for name, child in children]
    try:
        with torch.no_grad():
            output = skeleton(*[torch.empty((max(2, len(t)), *t.shape[1:]), device='meta', dtype=dtype
                                            if t.is_floating_point() and dtype else t.dtype) for t in inputs])
    finally:
        for hook in hooks:
            hook.remove()
    names = [name for name, _ in children]
    problem = None
    if [name for name, _, _ in calls] != names:
        problem = f'its forward calls {[name for name, _, _ in calls]}'
    else:
        for (name, args, _), (_, _, previous) in zip(calls[1:], calls):
            if len(args) != 1 or args[0] is not previous:
                problem = f'{name!r} is not called on the output of the child before it'
                break
        if problem is None and output is not calls[-1][2]:
            problem = f'its output is not the output of its last child {names[-1]!r}'
    if problem is not None:
        raise ValueError(f'Expected a network whose forward calls its top-level children {names} one after another '
                         f'(a chain), to cut it into pipeline stages. Received: {type(network).__name__}, where '
                         f'{problem}. Write the network as a chain (an nn.Sequential of its blocks), or train it '
                         f'without pipeline.')
