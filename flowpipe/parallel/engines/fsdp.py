"""FSDP reduce-scatter: the gradient synchronization of sharded data parallel, the rank's module sharded with torch's
FSDP2 over the ranks of a job (``ranks.DataRanks`` cuts the global batch), a sibling of ``ddp.DdpAllReduce``.

``fully_shard`` (``torch.distributed.fsdp``) is applied to each unit (``flowpipe.parallel.sharding`` says which) and
to the root; the parameters become ``DTensor`` shards, and the optimizer is built on them. Three things differ from
DDP:

1. gradients are summed, not averaged: every unit's reduction divides by 1 and uses sums only
   (``set_gradient_divide_factor(1)``, ``set_force_sum_reduction_for_comms``), so the weighted piece losses give
   the global batch's gradient exactly, whatever the world size;
2. every forward and backward takes part in collectives (a unit's all-gather, the last backward's
   reduce-scatter), so the part runs in ``lockstep``: every rank runs as many pieces as the rank with the most
   micro-batches. A rank with fewer (an idle rank: none) runs pieces without items (``join_empty``): a forward in
   evaluation mode (BatchNorm statistics untouched) on an empty slice of its inputs and a backward of the outputs'
   sum, which is zero: its gradients are zeros, and its part in the collectives is done;
3. gradient synchronization waits for the last piece (``set_requires_gradient_sync``); clipping by norm is
   torch's ``clip_grad_norm_`` on ``DTensor`` gradients (the norm over every shard); the non-finite check reads
   every rank's local shards and takes the maximum over the ranks.

Saving: the ``state_dict`` methods gather the whole state on rank 0 (every rank calls them: ``collective_state``),
in the layout of one process, so a model file saved here loads in one process and on any number of ranks; the
``load_`` methods take the whole state on every rank and keep each rank's shard (``flowpipe.parallel.sharded_state``).
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import torch
import torch.distributed as dist
from torch import nn

from ...torchutils import NO_CONTEXT
from .. import distributed, sharded_state
from ..sharding import Sharding
from .collectives import coalesced, from_rank_0, kept
from .sync import GradientSync
from .tensors import BatchTensors, device_of, evaluating, local_shard, move, to_device

if TYPE_CHECKING:
    from ..split import Piece
    from .base import Engine
    from .placement import Placement
    from .ranks import DataRanks

__all__ = ['FsdpReduceScatter', 'check_tied', 'sharding_units', 'storage_bytes']


def sharding_units(module: nn.Module, units: tuple[type, ...] | int | None) -> list[nn.Module]:
    """The submodules of ``module`` that become FSDP units, inner ones first (the root is not among them); each runs
    a forward of its own (FSDP2 refuses an ``nn.ModuleList`` or ``nn.ModuleDict``: the rules look inside them)."""
    if units is None:
        return [block for block in _default_units(module) if _holds_parameters(block)]
    found, owned = [], set()
    for sub in _post_order(module):
        if sub is module or not _runs(sub):
            continue
        if isinstance(units, int):
            free = [p for p in sub.parameters() if id(p) not in owned]
            chosen = sum(p.numel() for p in free) >= units
        else:
            free, chosen = list(sub.parameters()), isinstance(sub, units)
        if chosen:
            found.append(sub)
            owned.update(id(p) for p in free)
    return found


def _default_units(module: nn.Module) -> list[nn.Module]:
    """The top-level children of ``module``, a child named ``body`` giving its stages instead, and each stage made of
    repeated blocks giving the blocks (``_repeated``); containers without a forward give their children."""
    blocks = []
    for name, child in module.named_children():
        if name == 'body':
            blocks.extend(block for stage in _running(child.children()) for block in _repeated(stage))
        else:
            blocks.extend(_running([child]))
    return blocks


def _repeated(stage: nn.Module) -> list[nn.Module]:
    """The blocks of ``stage`` when it is made of repeated blocks: going down while a module holds its parameters in
    one child, the first that holds them in two or more children of one class (each a module with a forward, such as
    a ResNet stage's residual blocks, an EfficientNet stage's MBConv blocks, a dense block's layers); else
    ``[stage]``."""
    inner = stage
    while not any(True for _ in inner.parameters(recurse=False)):
        children = [child for child in inner.children() if _holds_parameters(child)]
        if len(children) != 1:
            break
        inner = children[0]
    else:
        return [stage]
    if len(children) > 1 and len({type(child) for child in children}) == 1 and _runs(children[0]):
        return children
    return [stage]


def _running(modules: Iterable[nn.Module]) -> list[nn.Module]:
    """``modules``, each container without a forward of its own replaced by its children, recursively."""
    return [found for sub in modules for found in ([sub] if _runs(sub) else _running(sub.children()))]


def _runs(module: nn.Module) -> bool:
    return type(module).forward is not nn.Module.forward


def _holds_parameters(module: nn.Module) -> bool:
    return any(True for _ in module.parameters())


def check_tied(module: nn.Module, units: list[nn.Module], setting: Any = None) -> None:
    """Refuse a parameter held by modules in different FSDP units (``units``, inside the root ``module``): tied
    weights, such as input and output embeddings, must be gathered by one unit. Every rank raises it alike, before
    any collective."""
    owners: dict[int, dict[str, nn.Module]] = {}
    chosen = {id(unit) for unit in units}

    def visit(sub: nn.Module, prefix: str, unit: nn.Module) -> None:
        unit = sub if id(sub) in chosen else unit
        for name, parameter in sub.named_parameters(recurse=False):
            owners.setdefault(id(parameter), {})[prefix + name] = unit
        for name, child in sub.named_children():
            visit(child, f'{prefix}{name}.', unit)
    visit(module, '', module)
    for names in owners.values():
        if len({id(unit) for unit in names.values()}) > 1:
            raise ValueError(f"Expected every parameter in one sharding unit. Received: tied parameters "
                             f"{', '.join(sorted(names))} in different units under sharding_units={setting!r}. "
                             f"Choose sharding_units so that one unit encloses every module sharing the weight (a "
                             f"module class enclosing them, or an int above their parameter count, which leaves them "
                             f"to the root), or untie the weights.")


def _post_order(module: nn.Module) -> Iterable[nn.Module]:
    for child in module.children():
        yield from _post_order(child)
    yield module


def storage_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the storages behind ``tensors`` (each storage once, padding included): what they hold in memory."""
    seen: dict[tuple[str, int], int] = {}
    for tensor in tensors:
        storage = local_shard(tensor).untyped_storage()
        seen[(str(tensor.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


class FsdpReduceScatter(GradientSync):
    """FSDP2's sum reduce-scatter in the last piece's backward (see the module docstring); ``ranks``: the job's
    data-parallel ranks.

    Attributes:
        mesh: the ``DeviceMesh`` of the shards: 1-D, or ``(replicate, shard)`` for ``'hybrid'``.
        skeleton: the network before sharding, parameters on the ``meta`` device (``sharded_state.skeleton``).
    """

    lockstep = True
    collective_state = True

    def __init__(self, ranks: 'DataRanks'):
        self.ranks = ranks
        self.optimizer: torch.optim.Optimizer | None = None

    def wrap(self, placement: 'Placement', plan: Any) -> list[nn.Module]:
        """Shard the module in place: each unit, then the root; reductions sum (no division by the world size)."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, fully_shard
        module, device = placement.module, placement.devices[0]
        sharding: Sharding = plan.sharding
        units = sharding_units(module, sharding.units)
        check_tied(module, units, sharding.units)
        self.module, self.skeleton = module, sharded_state.skeleton(module)   # what a model file stores
        shape = sharding.mesh_shape(plan.world.size)
        self.mesh = init_device_mesh(device.type, shape,
                                     mesh_dim_names=('shard',) if len(shape) == 1 else ('replicate', 'shard'))
        options = _shard_options(plan, sharding, self.mesh, device)
        for unit in units:
            fully_shard(unit, **options)
        fully_shard(module, **options)
        for sub in module.modules():
            if isinstance(sub, FSDPModule):
                sub.set_gradient_divide_factor(1.0)
                sub.set_force_sum_reduction_for_comms(True)
        return [module]

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Clear the gradients (``set_to_none``); the optimizer is kept for ``rank_bytes``."""
        self.optimizer = optimizer
        optimizer.zero_grad(set_to_none=True)

    def backward_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Every unit reduce-scatters its gradients in the backward of the last piece only."""
        self.module.set_requires_gradient_sync(last)
        return NO_CONTEXT

    def broadcast(self, active: tuple[int, ...]) -> None:
        """Floating buffers averaged over the ranks that saw items, integer buffers from rank 0."""
        self.ranks.average_buffers(list(self.module.buffers()))

    @torch.no_grad()
    def sync(self) -> None:
        """Every rank takes rank 0's buffers; the parameters are each rank's own shards."""
        with distributed.collective("the broadcast of rank 0's buffers"):
            coalesced(list(self.module.buffers()), from_rank_0)

    @torch.no_grad()
    def any_nonfinite(self, flag: torch.Tensor) -> bool:
        """Whether any rank's flag is set (one all-reduce: every rank takes the same decision)."""
        flag = flag.to(self.ranks.group_device, torch.float64)
        kept(flag)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag)

    def join_empty(self, engine: 'Engine', replica: int, piece: 'Piece', batch: BatchTensors,
                   keep_outputs: bool, last: bool) -> tuple[torch.Tensor, Any]:
        """A piece without items joins the collectives with a zero gradient."""
        forward, device = engine.forwards[replica], engine.devices[replica]
        with evaluating(self.module), self.backward_sync(last):     # no BatchNorm statistics of no items
            with engine.precision.autocast(device):
                outputs = forward(*[move(t, device, batch.dtype, piece, engine.memory_format) for t in batch.inputs])
            floating = _floating(outputs)
            if not floating:
                raise TypeError(f'Expected floating outputs of the network under sharding (a rank without items '
                                f'backwards their sum, zero, to join the collectives). Received: outputs of '
                                f'type {type(outputs).__name__} without a floating tensor.')
            sum(out.sum() for out in floating).backward()
        loss = torch.zeros((), device=device)
        return loss, to_device(outputs, device_of(outputs, device)) if keep_outputs else None

    def state_dict(self, module: nn.Module) -> dict:
        """The whole network's ``state_dict`` on rank 0 (CPU tensors), ``{}`` on the others: a collective."""
        return sharded_state.full_model_state(module)

    def load_state_dict(self, module: nn.Module, state: Mapping[str, Any]) -> None:
        """Load the whole network's ``state_dict`` (given on every rank): each rank keeps its shards."""
        sharded_state.load_full_model_state(module, state)

    def optimizer_state_dict(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """The whole optimizer state on rank 0, as ``Optimizer.state_dict()`` lays it out; ``{}`` on the others."""
        return sharded_state.full_optimizer_state(module, optimizer)

    def load_optimizer_state_dict(self, module: nn.Module, optimizer: torch.optim.Optimizer,
                                  state: Mapping[str, Any]) -> None:
        """Load a whole optimizer state (given on every rank): each rank keeps the state of its shards."""
        sharded_state.load_full_optimizer_state(module, optimizer, state)

    def rank_bytes(self) -> dict[str, int | None]:
        """Bytes this rank holds of parameters, gradients and optimizer state (their local shards' storages);
        ``None`` for what is not made yet (gradients before the first backward, Adam's state before its step)."""
        params = list(self.module.parameters())
        grads = [param.grad for param in params if param.grad is not None]
        optimizer = self.optimizer
        state = [] if optimizer is None else [value for values in optimizer.state.values()
                                              for value in values.values() if isinstance(value, torch.Tensor)]
        return {'parameters': storage_bytes(params), 'gradients': storage_bytes(grads) if grads else None,
                'optimizer state': storage_bytes(state) if state else None}

    def describe(self, engine: 'Engine', batch_size: int | None, loss: Any) -> str | None:
        """The plan's description with the sharding, the mesh and the bytes this rank holds."""
        return engine.plan.describe(batch_size, rank_bytes=self.rank_bytes(), loss=loss)


def _shard_options(plan: Any, sharding: Sharding, mesh: Any, device: torch.device) -> dict:
    """``fully_shard``'s options: the mesh, resharding, mixed precision (outputs back in float32: the loss and its
    weighting by piece_size / n are not rounded to bfloat16) and offloading to the CPU."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy
    cuda = device.type == 'cuda'
    return {'mesh': mesh, 'reshard_after_forward': sharding.reshard_after_forward,
            'mp_policy': (MixedPrecisionPolicy(param_dtype=getattr(torch, plan.amp), reduce_dtype=torch.float32,
                                               output_dtype=torch.float32)
                          if cuda and plan.amp else MixedPrecisionPolicy()),
            'offload_policy': CPUOffloadPolicy() if cuda and sharding.offload else OffloadPolicy()}


def _floating(outputs: Any) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs] if outputs.is_floating_point() else []
    values = outputs.values() if isinstance(outputs, dict) else outputs if isinstance(outputs, (list, tuple)) else ()
    return [tensor for value in values for tensor in _floating(value)]
