"""The device mesh: the named axes a model's copies and pieces are laid out on, built once from the config and the
world, frozen, part of the device plan.

Axes (each with a size; 1 when unused):

- ``dp``: data-parallel replicas, the replicas of one process (logical devices, GPUs) and the ranks of a job;
- ``shard``: the ranks a model's parameters are sharded over (FSDP, ``'sharding'``);
- ``pp``: pipeline stages (``'pipeline'``), one stage per rank;
- ``tp``: tensor parallel (``'tensor_parallel'``), the ranks each split layer is divided over (``tensor_plan``).

Ranks are laid out with ``pp`` outermost and ``tp`` innermost: ``rank = ((stage * DP + d) * SHARD + h) * TP + t``,
where ``DP`` counts ranks (a process's replicas share its rank). The ranks that read the same items form a
pipeline: the data side (``flowpipe.data.shards``, the run loop) splits every global batch over ``data_size``
groups and gives this process part ``data_rank``; without a pipeline those are the world's size and rank. One
process with several logical devices is the same mesh on one rank: ``dp`` replicas, ``data_size`` 1.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any

__all__ = ['AXES', 'Mesh', 'make_mesh']

#: the axes, outermost first in the order ranks are laid out
AXES = ('pp', 'dp', 'shard', 'tp')


@dataclass(frozen=True)
class Mesh:
    """The sizes of the mesh's axes and this process's place on it.

    Attributes:
        dp, shard, pp, tp: the axes' sizes (see the module docstring).
        rank: this process's rank (0 in one process).
        replicas: the ``dp`` coordinates one process holds (its logical devices; 1 in a distributed job).
    """

    dp: int = 1
    shard: int = 1
    pp: int = 1
    tp: int = 1
    rank: int = 0
    replicas: int = 1

    def __post_init__(self) -> None:
        sizes = {axis: getattr(self, axis) for axis in (*AXES, 'replicas')}
        bad = {axis: size for axis, size in sizes.items()
               if isinstance(size, bool) or not isinstance(size, numbers.Integral) or size < 1}
        if bad or self.dp % self.replicas or not 0 <= self.rank < self.processes:
            raise ValueError(f'Expected positive axis sizes, replicas dividing dp and a rank below the number of '
                             f'processes. Received: {sizes} and rank {self.rank}. Build meshes with make_mesh(...).')

    def size(self, axis: str) -> int:
        """How many coordinates ``axis`` has (``dp`` counts replicas and ranks)."""
        return getattr(self, _checked(axis))

    @property
    def processes(self) -> int:
        """How many processes the mesh spans."""
        return self.dp // self.replicas * self.shard * self.pp * self.tp

    def coordinate(self, axis: str) -> int:
        """This process's coordinate on ``axis`` (on ``dp``: the rank's, its first replica's for several)."""
        return self._coordinates(self.rank)[_checked(axis)] * (self.replicas if axis == 'dp' else 1)

    def group(self, axis: str) -> tuple[int, ...]:
        """The ranks that differ from this one only on ``axis`` (this rank's pipeline for ``'pp'``), in order."""
        _checked(axis)
        mine = self._coordinates(self.rank)
        return tuple(rank for rank in range(self.processes)
                     if all(c == mine[a] for a, c in self._coordinates(rank).items() if a != axis))

    def groups(self, axis: str) -> tuple[tuple[int, ...], ...]:
        """Every group of ranks along ``axis`` (each rank's ``group(axis)``), ordered by their first rank: every
        rank creates them alike, as ``torch.distributed.new_group`` wants."""
        found = {Mesh(**{**self._fields(), 'rank': rank}).group(axis) for rank in range(self.processes)}
        return tuple(sorted(found))

    @property
    def data_rank(self) -> int:
        """Which part of every global batch this process takes: the same on every stage of a pipeline."""
        coordinates = self._coordinates(self.rank)
        return coordinates['dp'] * self.shard + coordinates['shard']

    @property
    def data_size(self) -> int:
        """How many parts every global batch is split into over the processes (the world's size without a
        pipeline, 1 in one process)."""
        return self.dp // self.replicas * self.shard

    def describe(self) -> str:
        """One line: the axes in use and this process's place."""
        used = [f'{axis}={getattr(self, axis)}' for axis in AXES if getattr(self, axis) > 1] or ['dp=1']
        if self.processes == 1:
            return f'mesh {" x ".join(used)} in one process'
        place = ', '.join(f'{axis} {self.coordinate(axis)}' for axis in AXES if getattr(self, axis) > 1)
        return (f'mesh {" x ".join(used)} over {self.processes} ranks; rank {self.rank} is at {place}, reads part '
                f'{self.data_rank} of {self.data_size} of every global batch')

    def _coordinates(self, rank: int) -> dict[str, int]:
        sizes = {'pp': self.pp, 'dp': self.dp // self.replicas, 'shard': self.shard, 'tp': self.tp}
        coordinates = {}
        for axis in reversed(AXES):
            rank, coordinates[axis] = divmod(rank, sizes[axis])
        return coordinates

    def _fields(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in ('dp', 'shard', 'pp', 'tp', 'rank', 'replicas')}


def _checked(axis: str) -> str:
    if axis not in AXES:
        raise ValueError(f'Expected a mesh axis among {list(AXES)}. Received: {axis!r}.')
    return axis


def make_mesh(world: Any = None, replicas: int = 1, pipeline: int | None = None,
              shard_shape: tuple[int, ...] | None = None, tensor: int = 1) -> Mesh:
    """The mesh of a plan: ``replicas`` devices in one process (``world`` ``None`` or of size 1), or the ranks of
    ``world`` split into ``pipeline`` stages (``None``: one), ``tensor`` ranks per split layer (innermost, adjacent
    ranks) and, under sharding, ``shard_shape`` (``(shards,)`` or ``(replicas, shards)`` over the ranks of one stage
    and one ``tp`` coordinate, ``Sharding.mesh_shape``).

    In one process a pipeline, sharding or tensor parallelism asked for changes nothing: the one device holds the
    whole model.
    """
    if world is None or world.size <= 1:
        return Mesh(dp=replicas, replicas=replicas)
    stages = pipeline or 1
    if world.size % stages:
        raise ValueError(f"Expected a world size that the number of pipeline stages divides (world = data-parallel "
                         f"groups x stages). Received: pipeline={stages} in a job of {world.size} processes. Start a "
                         f"multiple of {stages} processes, or change 'pipeline'.")
    if world.size // stages % tensor:
        raise ValueError(f"Expected a world size that pipeline stages x tensor_parallel divides (world = dp x shard x "
                         f"pp x tp). Received: tensor_parallel={tensor}, pipeline={stages} in a job of {world.size} "
                         f"processes. Start a multiple of {stages * tensor} processes, or change 'tensor_parallel'.")
    ranks = world.size // stages // tensor
    if shard_shape is None:
        return Mesh(dp=ranks, pp=stages, tp=tensor, rank=world.rank)
    groups, shards = shard_shape if len(shard_shape) == 2 else (1, shard_shape[0])
    return Mesh(dp=groups, shard=shards, pp=stages, tp=tensor, rank=world.rank)
