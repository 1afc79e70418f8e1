"""One shard of the model per process: the distributed engine's step on a module sharded with torch's FSDP2.

``fully_shard`` (``torch.distributed.fsdp``) is applied to each unit (``flowpipe.parallel.sharding`` says which) and
to the root; the parameters become ``DTensor`` shards, and the optimizer is built on them. A step is the distributed
engine's (item counts exchanged, pieces weighted by ``piece_size / n`` of the global batch), with three differences:

1. gradients are summed, not averaged: every unit's reduction divides by 1 and uses sums only
   (``set_gradient_divide_factor(1)``, ``set_force_sum_reduction_for_comms``), so the weighted piece losses give
   the global batch's gradient exactly, whatever the world size;
2. every forward and backward takes part in collectives (a unit's all-gather, the last backward's
   reduce-scatter), so every rank runs the same number of pieces: as many as the rank with the most micro-batches.
   A rank with fewer (an idle rank: none) runs pieces without items: a forward in evaluation mode (BatchNorm
   statistics untouched) on an empty slice of its inputs and a backward of the outputs' sum, which is zero: its
   gradients are zeros, and its part in the collectives is done;
3. gradient synchronization waits for the last piece (``set_requires_gradient_sync``); clipping by norm is
   torch's ``clip_grad_norm_`` on ``DTensor`` gradients (the norm over every shard); the non-finite check reads
   every rank's local shards and takes the maximum over the ranks.

Prediction is collective too: every rank must call it alike (for each global batch of a sharded run, or the whole
set on every rank).
"""
from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn

from ...data.shards import NO_RUN, RunContext
from ...torchutils import NO_CONTEXT
from .. import distributed, sharded_state
from ..losses import StepLoss
from ..sharding import Sharding
from ..split import Piece, chunk_sizes, split_batch
from .base import StepResult
from .distributed import DistributedEngine, _coalesced, _from_rank_0, _kept
from .tensors import BatchTensors, concat, device_of, evaluating, local_shard, move, to_device

__all__ = ['ShardedEngine', 'check_tied', 'sharding_units']


def sharding_units(module: nn.Module, units: tuple[type, ...] | int | None) -> list[nn.Module]:
    """The submodules of ``module`` that become FSDP units, inner ones first (the root is not among them)."""
    if units is None:
        names = ('initial_block', 'body', 'head')
        children = dict(module.named_children())
        if all(name in children for name in names):
            blocks = [children['initial_block'], *children['body'].children(), children['head']]
        else:
            blocks = list(children.values())
        return [block for block in blocks if any(True for _ in block.parameters())]
    found, owned = [], set()
    for sub in _post_order(module):
        if sub is module:
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
                             f"{', '.join(sorted(names))} in different units under sharding_units={setting!r}. Choose sharding_units so that one unit encloses every module "
                             f"sharing the weight (a module class enclosing them, or an int above their parameter "
                             f"count, which leaves them to the root), or untie the weights.")


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


class ShardedEngine(DistributedEngine):
    """Runs every step on ``module`` sharded with FSDP2 over the ranks of the job (see the module docstring).

    Saving: ``state_dict()`` and ``optimizer_state_dict()`` gather the whole state on rank 0 (every rank calls
    them: ``collective_state``), in the layout of one process, so a model file saved here loads in one process and
    on any number of ranks; the ``load_`` hooks take the whole state on every rank and keep each rank's shard
    (``flowpipe.parallel.sharded_state``).

    Attributes:
        mesh: the ``DeviceMesh`` of the shards: 1-D, or ``(replicate, shard)`` for ``'hybrid'``.
        skeleton: the network before sharding, parameters on the ``meta`` device (``sharded_state.skeleton``).
    """

    collective_state = True

    def wrap(self, module: nn.Module, device: torch.device) -> nn.Module:
        """Shard ``module`` in place: each unit, then the root; reductions sum (no division by the world size)."""
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy
        from torch.distributed.fsdp import fully_shard
        sharding: Sharding = self.plan.sharding
        units = sharding_units(module, sharding.units)
        check_tied(module, units, sharding.units)
        self.skeleton = sharded_state.skeleton(module)      # what a model file stores of a network in the config
        shape = sharding.mesh_shape(self.plan.world.size)
        self.mesh = init_device_mesh(device.type, shape,
                                     mesh_dim_names=('shard',) if len(shape) == 1 else ('replicate', 'shard'))
        cuda = device.type == 'cuda'
        options = {'mesh': self.mesh, 'reshard_after_forward': sharding.reshard_after_forward,
                   # outputs back in float32: the loss and its weighting by piece_size / n are not rounded to bfloat16
                   'mp_policy': (MixedPrecisionPolicy(param_dtype=getattr(torch, self.plan.amp),
                                                      reduce_dtype=torch.float32, output_dtype=torch.float32)
                                 if cuda and self.plan.amp else MixedPrecisionPolicy()),
                   'offload_policy': CPUOffloadPolicy() if cuda and sharding.offload else OffloadPolicy()}
        for unit in units:
            fully_shard(unit, **options)
        fully_shard(module, **options)
        for sub in module.modules():
            if isinstance(sub, FSDPModule):
                sub.set_gradient_divide_factor(1.0)
                sub.set_force_sum_reduction_for_comms(True)
        self._optimizer: torch.optim.Optimizer | None = None
        return module

    def state_dict(self) -> dict:
        """The whole network's ``state_dict`` on rank 0 (CPU tensors), ``{}`` on the others: a collective."""
        return sharded_state.full_model_state(self._inner)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load the whole network's ``state_dict`` (given on every rank): each rank keeps its shards."""
        sharded_state.load_full_model_state(self._inner, state)

    def optimizer_state_dict(self, optimizer: torch.optim.Optimizer) -> dict:
        """The whole ``optimizer`` state on rank 0, as ``Optimizer.state_dict()`` lays it out; ``{}`` on the
        others: a collective."""
        return sharded_state.full_optimizer_state(self._inner, optimizer)

    def load_optimizer_state_dict(self, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]) -> None:
        """Load a whole optimizer state (given on every rank): each rank keeps the state of its shards."""
        sharded_state.load_full_optimizer_state(self._inner, optimizer, state)

    def before_step(self, inputs: Any, targets: Any, form: Any = None) -> None:
        """Exchange the ranks' item counts and loss normalizers: the global batch size and normalizer, and the
        number of pieces every rank runs."""
        self.take_counts(inputs, targets, form)

    def after_step(self, inputs: Any, result: StepResult, return_outputs: bool) -> StepResult:
        """The step's result: an idle rank's outputs are its pieces' (empty, of the busy ranks' shape)."""
        return result

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Clear the gradients (``set_to_none``); the optimizer is kept for ``describe``."""
        self._optimizer = optimizer
        optimizer.zero_grad(set_to_none=True)

    def pieces(self, size: int, counts: Sequence[int]) -> tuple[Piece, ...]:
        """This rank's pieces of ``size`` items, weighted by their share of the global batch (``counts``), then
        pieces without items up to the most pieces of a rank."""
        total, micro = sum(counts), self.plan.microbatch
        own = tuple(replace(piece, weight=piece.size / total) for piece in split_batch(size, 1, micro)) if size else ()
        most = max(len(chunk_sizes(count, micro)) for count in counts if count)
        return own + tuple(Piece(len(own) + i, 0, size, size, 0.0) for i in range(most - len(own)))

    def groups(self, batch_size: int) -> dict[int, tuple[Piece, ...]]:
        """This rank's pieces: as many as any rank's (see ``pieces``)."""
        key = (batch_size, self.counts)
        groups = self._groups.get(key)
        if groups is None:
            groups = self._groups[key] = {0: self.pieces(batch_size, self.counts)}
        return groups

    def backward_sync(self, last: bool) -> contextlib.AbstractContextManager:
        """Every unit reduce-scatters its gradients in the backward of the last piece only."""
        self._inner.set_requires_gradient_sync(last)
        return NO_CONTEXT

    def reduce_gradients(self, active: tuple[int, ...]) -> None:
        """Nothing: the last piece's backward left each rank its shard of the global batch's gradient."""

    def run_piece(self, replica: int, piece: Piece, batch: BatchTensors, step_loss: StepLoss, keep_outputs: bool,
                  last: bool, seed: int) -> tuple[torch.Tensor, Any]:
        """A piece with items as in every engine; one without items joins the collectives with a zero gradient."""
        if piece.size:
            return super().run_piece(replica, piece, batch, step_loss, keep_outputs, last, seed)
        forward, device = self.forwards[replica], self.devices[replica]
        with evaluating(self._inner), self.backward_sync(last):     # no BatchNorm statistics of no items
            with self.precision.autocast(device):
                outputs = forward(*[move(t, device, batch.dtype, piece, self.memory_format) for t in batch.inputs])
            floating = _floating(outputs)
            if not floating:
                raise TypeError(f'Expected floating outputs of the network under sharding (a rank without items '
                                f'backwards their sum, zero, to join the collectives). Received: outputs of '
                                f'type {type(outputs).__name__} without a floating tensor.')
            sum(out.sum() for out in floating).backward()
        loss = torch.zeros((), device=device)
        return loss, to_device(outputs, device_of(outputs, device)) if keep_outputs else None

    @torch.no_grad()
    def nonfinite(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the global batch's loss or any rank's shard of the gradient holds a nan or an inf (one
        all-reduce of a flag: every rank takes the same decision)."""
        flag = self.nonfinite_flag(loss, optimizer).to(self._group_device, torch.float64)
        _kept(flag)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag)

    @torch.no_grad()
    def sync(self) -> None:
        """Every rank takes rank 0's buffers; the parameters are each rank's own shards."""
        with distributed.collective("the broadcast of rank 0's buffers"):
            _coalesced(list(self._inner.buffers()), _from_rank_0)

    def predict(self, inputs: Sequence[torch.Tensor], run: RunContext | None = None) -> Any:
        """This rank's outputs, micro-batch by micro-batch; a collective: the ranks exchange their item counts and
        run as many pieces each (pieces without items on the ranks with fewer). ``run``: where the batch lies in its
        run; one whose whole batches are split into blocks over the ranks is refused."""
        self.run = NO_RUN if run is None else run
        if self.run.whole_batches == 'split':
            raise ValueError("Expected Validate(..., shard=False) for a sharded model: a sharded forward is a "
                             "collective every rank joins, and shard=True gives the ranks blocks of batches that may "
                             "differ in number (a rank would wait for the others forever). Received: a prediction in "
                             "a run whose batches are split into blocks over the ranks (Validate(shard=True)).")
        batch = self.prepare(inputs, ())
        counts, _ = self._exchange_counts(inputs)
        if not sum(counts):
            counts = (1,)       # no items anywhere: one empty piece each, for outputs of the right shape
        device = self.devices[0]
        with evaluating(self._inner), torch.no_grad(), self.precision.autocast(device):
            return concat([self._inner(*[move(t, device, batch.dtype, piece, self.memory_format)
                                         for t in batch.inputs]) for piece in self.pieces(batch.size, counts)])

    def rank_bytes(self) -> dict[str, int | None]:
        """Bytes this rank holds of parameters, gradients and optimizer state (their local shards' storages);
        ``None`` for what is not made yet (gradients before the first backward, Adam's state before its step)."""
        params = list(self._inner.parameters())
        grads = [param.grad for param in params if param.grad is not None]
        optimizer = self._optimizer
        state = [] if optimizer is None else [value for values in optimizer.state.values()
                                              for value in values.values() if isinstance(value, torch.Tensor)]
        return {'parameters': storage_bytes(params), 'gradients': storage_bytes(grads) if grads else None,
                'optimizer state': storage_bytes(state) if state else None}

    def describe(self, batch_size: int | None = None, loss: Any = None) -> str:
        """The plan's description with the sharding, the mesh and the bytes this rank holds."""
        return self.plan.describe(batch_size, rank_bytes=self.rank_bytes(), loss=loss)


def _floating(outputs: Any) -> list[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        return [outputs] if outputs.is_floating_point() else []
    values = outputs.values() if isinstance(outputs, dict) else outputs if isinstance(outputs, (list, tuple)) else ()
    return [tensor for value in values for tensor in _floating(value)]
