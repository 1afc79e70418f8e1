"""The ``sharding`` flags of a plan, checked once into a frozen :class:`Sharding` (pure: no torch import).

``sharding`` shards parameters, gradients and optimizer state over the ranks of a distributed job with torch's
FSDP2 (``torch.distributed.fsdp.fully_shard``; ``flowpipe.parallel.engines.sharded`` applies it):

- ``None``: no sharding (every rank holds the whole model: DDP);
- ``'full'``: every unit's parameters stay sharded outside its forward and backward (ZeRO-3);
- ``'grad_op'``: a unit's parameters stay gathered from its forward to its backward (``reshard_after_forward=False``);
- ``'hybrid'``: a 2-D mesh, sharded inside groups of ``sharding_group`` ranks (default: the ranks of a node,
  ``LOCAL_WORLD_SIZE``) and replicated across the groups.

``sharding_units`` says which modules become FSDP units (each gathers its parameters in one all-gather): ``None``
for the blocks of the network (its top-level children holding parameters, a child named ``body`` giving each of
its stages instead, and a stage made of repeated blocks, such as a ResNet stage's residual blocks, each block), a
module class or a tuple of classes (every module of one of them), or a positive int (a module whose parameters not
already in a unit below it number at least that many). No rule makes a unit of a container without a forward of
its own (``nn.ModuleList``, ``nn.ModuleDict``: FSDP2 refuses them): ``None`` takes its children, an int leaves its
parameters to the module above. The root module is always a unit too. ``sharding_offload=True`` keeps the shards and the optimizer step on the
CPU between uses (``CPUOffloadPolicy``; on a CPU-only job they are there already, so it changes nothing).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

from .distributed import World

__all__ = ['SHARDING_MODES', 'Sharding', 'make_sharding']

#: accepted ``sharding`` values -> what each does
SHARDING_MODES = {'full': 'parameters, gradients and optimizer state sharded (ZeRO-3)',
                  'grad_op': 'gradients and optimizer state sharded, parameters kept gathered from forward to '
                             'backward',
                  'hybrid': 'sharded inside groups of ranks, replicated across the groups'}


@dataclass(frozen=True)
class Sharding:
    """How a distributed job shards its model (see the module docstring).

    Attributes:
        mode: ``'full'``, ``'grad_op'`` or ``'hybrid'``.
        units: ``None`` (the ready networks' blocks), a tuple of module classes, or a parameter-count threshold.
        group: ranks per shard group (``'hybrid'``; the whole world otherwise), ``None`` before the world is known.
        offload: keep shards on the CPU between uses.
    """

    mode: str
    units: tuple[type, ...] | int | None = None
    group: int | None = None
    offload: bool = False

    @property
    def reshard_after_forward(self) -> bool:
        """Whether a unit frees its gathered parameters after its forward (all but ``'grad_op'``)."""
        return self.mode != 'grad_op'

    def mesh_shape(self, world_size: int) -> tuple[int, ...]:
        """``(shards,)`` for a 1-D mesh, ``(replicas, shards)`` for ``'hybrid'``."""
        if self.mode != 'hybrid':
            return (world_size,)
        group = self.group or world_size
        return (world_size // group, group)

    def describe(self, world: World | None) -> list[str]:
        """Readable lines: the mode, the units and the mesh (for ``world``)."""
        units = ('the blocks of the network (initial_block, each block of body, head) and the root'
                 if self.units is None else
                 f'modules of {self.units} parameters or more, and the root' if isinstance(self.units, int) else
                 f'every {", ".join(cls.__name__ for cls in self.units)} module, and the root')
        lines = [f'  sharding {self.mode!r}: {SHARDING_MODES[self.mode]}', f'  units: {units}']
        if world is not None:
            shape = self.mesh_shape(world.size)
            if len(shape) == 1:
                lines.append(f'  mesh: 1-D, {shape[0]} ranks, each holds 1/{shape[0]} of every unit')
            else:
                lines.append(f'  mesh: 2-D, {shape[0]} replicas x {shape[1]} shards (sharded inside groups of '
                             f'{shape[1]} consecutive ranks, replicated across {shape[0]} groups)')
        if self.offload:
            lines.append('  offload: shards and the optimizer step on the CPU')
        return lines


def _check_units(units: Any) -> tuple[type, ...] | int | None:
    expected = ('Expected sharding_units as None (the network\'s blocks), an nn.Module class, a tuple of them, or a '
                'positive int (a parameter count).')
    if units is None:
        return None
    if isinstance(units, numbers.Integral) and not isinstance(units, bool):
        if units < 1:
            raise ValueError(f'{expected} Received: sharding_units={units!r}.')
        return int(units)
    classes = tuple(units) if isinstance(units, (list, tuple)) else (units,)
    from torch import nn
    bad = [cls for cls in classes if not (isinstance(cls, type) and issubclass(cls, nn.Module))]
    if bad or not classes:
        raise TypeError(f'{expected} Received: sharding_units={units!r}.')
    return classes


def _check_group(group: Any, mode: str, world: World | None) -> int | None:
    if group is not None and (isinstance(group, bool) or not isinstance(group, numbers.Integral) or group < 1):
        raise ValueError(f'Expected sharding_group as a positive int (ranks per shard group) or None. Received: '
                         f'sharding_group={group!r}.')
    if group is not None and mode != 'hybrid':
        raise ValueError(f"Expected sharding_group only with sharding='hybrid'. Received: sharding_group={group!r} "
                         f"with sharding={mode!r}. Drop sharding_group, or use sharding='hybrid'.")
    if mode != 'hybrid' or world is None:
        return None if group is None else int(group)
    size = int(group) if group is not None else world.local_size
    if world.size % size:
        raise ValueError(f"Expected a shard group size that divides the world size {world.size}. Received: "
                         f"{size} ranks per group ({'sharding_group' if group is not None else 'LOCAL_WORLD_SIZE'}). "
                         f"Set sharding_group to a divisor of {world.size}.")
    return size


def make_sharding(sharding: Any, units: Any = None, group: Any = None, offload: Any = False,
                  world: World | None = None) -> Sharding | None:
    """The checked :class:`Sharding` of the flags, or ``None`` without ``sharding`` (then the other flags must be
    unset); ``world``: the distributed job's, to size the hybrid groups."""
    if sharding is None or sharding is False:
        given = {name: value for name, value in (('sharding_units', units), ('sharding_group', group),
                                                   ('sharding_offload', offload)) if value not in (None, False)}
        if given:
            raise ValueError(f"Expected sharding set for {sorted(given)}. Received: sharding={sharding!r} with "
                             f"{given}. Set sharding to one of {sorted(SHARDING_MODES)}, or drop them.")
        return None
    if not isinstance(sharding, str) or sharding.lower() not in SHARDING_MODES:
        raise ValueError(f'Expected sharding as None (no sharding: DDP) or one of {sorted(SHARDING_MODES)}. '
                         f'Received: sharding={sharding!r}.')
    offload = False if offload is None else offload
    if not isinstance(offload, bool):
        raise TypeError(f'Expected sharding_offload as a bool. Received: {offload!r} of type '
                        f'{type(offload).__name__}.')
    mode = sharding.lower()
    return Sharding(mode, _check_units(units), _check_group(group, mode, world), offload)
