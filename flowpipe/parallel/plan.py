"""The frozen device plan: every form of ``device``, ``microbatch``, ``device_weights``, ``device_map``, ``amp``,
``memory_format``, ``compile``, ``pin_memory`` and ``randomness`` turned into one immutable object, once, by
:func:`make_plan`.

The plan is pure data plus pure arithmetic (which items go where); engines (``flowpipe.parallel.engines``)
execute it. Its ``engine`` field names the kind of engine that runs it, chosen here from the flags
(``build_engine`` looks the kind up in its registry):

- ``'single'``: one device;
- ``'replicas'``: several devices, one model replica each, every batch split across them;
- ``'model_parallel'``: one model whose top-level children live on different devices (``device_map``);
- ``'distributed'``: one replica per process of a distributed job (``world``), every global batch sharded over
  the ranks before it reaches the model;
- ``'sharded'``: as ``'distributed'``, with the model's parameters, gradients and optimizer state sharded over the
  ranks (``sharding``, see ``flowpipe.parallel.sharding``);
- ``'pipeline'``: the network cut into stages, one per rank of a pipeline (``pipeline``, see
  ``flowpipe.parallel.stages``), pipelines replicated over the data-parallel ranks.

Every plan holds its frozen :class:`~flowpipe.parallel.mesh.Mesh` (``plan.mesh``): the named axes (``dp``,
``shard``, ``pp``) and where this process sits on them; the data side asks it which part of each batch to read.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from .devices import LogicalDevice, parse_devices
from .distributed import World
from .flags import check_microbatch, check_weights, parse_device_map, rank_device
from .item_random import DEFAULT as DEFAULT_RANDOMNESS, check_randomness, describe_randomness
from .losses import describe_loss
from .mesh import Mesh, make_mesh
from .sharding import Sharding, make_sharding
from .speed import check_amp, check_compile, check_memory_format, check_pin_memory, describe_speed
from .split import Piece, chunk_sizes, shard_sizes, split_batch
from .stages import Pipelining, make_pipelining

__all__ = ['DevicePlan', 'make_plan']

AUTO = 'auto'
SINGLE, REPLICAS, MODEL_PARALLEL, DISTRIBUTED = 'single', 'replicas', 'model_parallel', 'distributed'
SHARDED, PIPELINE = 'sharded', 'pipeline'


@dataclass(frozen=True)
class DevicePlan:
    """Where a model lives and how each batch is cut.

    Attributes:
        devices: logical devices, the primary first.
        microbatch: items per micro-batch, or ``None`` for whole batches.
        device_weights: relative shard sizes per device, or ``None`` for balanced shards.
        device_map: ``((part, device), ...)`` for model parallel, ``'auto'`` to balance parts at build time,
            or ``None``.
        amp: the autocast dtype, ``'float16'`` (with one gradient scaler) or ``'bfloat16'``, or ``False``.
        engine: the kind of engine that runs the plan (a key of ``flowpipe.parallel.factory.ENGINES``), given by
            keyword: ``'single'``, ``'replicas'``, ``'model_parallel'`` or ``'distributed'``.
        memory_format: ``'channels_last'`` (modules and 4-D inputs), ``'auto'`` (decided by ``build_engine`` from
            the module) or ``None`` (as given); by keyword.
        compile: ``torch.compile`` options as sorted ``(name, value)`` pairs, or ``None``; by keyword.
        pin_memory: batch tensors on the host go through pinned memory to CUDA devices; by keyword.
        world: this process's rank, the world size and the backend in a distributed job, else ``None``; by
            keyword.
        sharding: how a distributed job shards the model (engine ``'sharded'``), or ``None``; in one process a
            sharding asked for is kept here, and the one device holds the whole model; by keyword.
        randomness: how dropout draws its masks, ``'by_item'`` or ``'torch'`` (``flowpipe.parallel.item_random``);
            by keyword.
        pipeline: the stages and schedule of a pipelined model (engine ``'pipeline'`` in a distributed job; kept,
            changing nothing, in one process), or ``None``; by keyword.
        mesh: the axes and this process's place on them (``make_plan`` sets it; ``None`` only for plans built by
            hand); by keyword.
    """

    devices: tuple[LogicalDevice, ...]
    microbatch: int | None = None
    device_weights: tuple[float, ...] | None = None
    device_map: tuple[tuple[str, LogicalDevice], ...] | str | None = None
    amp: bool | str = False
    engine: str = field(kw_only=True)
    memory_format: str | None = field(default=None, kw_only=True)
    compile: tuple[tuple[str, Any], ...] | None = field(default=None, kw_only=True)
    pin_memory: bool = field(default=False, kw_only=True)
    world: World | None = field(default=None, kw_only=True)
    sharding: Sharding | None = field(default=None, kw_only=True)
    randomness: str = field(default=DEFAULT_RANDOMNESS, kw_only=True)
    pipeline: Pipelining | None = field(default=None, kw_only=True)
    mesh: Mesh | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.engine, str) or not self.engine:
            raise TypeError(f'Expected engine as the name of an engine kind, such as {SINGLE!r}. '
                            f'Received: engine={self.engine!r}.')
        mismatch = ((self.engine == MODEL_PARALLEL) != (self.device_map is not None)
                    or self.engine in (SINGLE, DISTRIBUTED, SHARDED, PIPELINE) and len(self.devices) != 1
                    or (self.engine in (DISTRIBUTED, SHARDED, PIPELINE)) != (self.world is not None)
                    or (self.engine == SHARDED) != (self.sharding is not None and self.world is not None)
                    or (self.engine == PIPELINE) != (self.pipeline is not None and self.world is not None))
        if mismatch:
            raise ValueError(f'Expected a plan whose engine fits its devices. Received: engine={self.engine!r} with '
                             f'{len(self.devices)} devices, device_map={self.device_map!r} and world={self.world}. '
                             f'Build plans with make_plan(...).')

    @property
    def primary(self) -> LogicalDevice:
        """The device that holds the optimizer's parameters and receives inputs and outputs."""
        return self.devices[0]

    @property
    def num_replicas(self) -> int:
        """How many copies of the model the batch is split across."""
        return len(self.devices) if self.engine == REPLICAS else 1

    def chunk_sizes(self, batch_size: int) -> tuple[int, ...]:
        """Micro-batch chunk sizes of a batch."""
        return chunk_sizes(batch_size, self.microbatch)

    def shard_sizes(self, batch_size: int) -> tuple[int, ...]:
        """Per-replica shard sizes of a batch (or of one chunk)."""
        return shard_sizes(batch_size, self.num_replicas, self.device_weights)

    def pieces(self, batch_size: int) -> tuple[Piece, ...]:
        """Every non-empty (chunk, replica) piece of a batch, in batch order, with its loss weight."""
        return split_batch(batch_size, self.num_replicas, self.microbatch, self.device_weights)

    def describe(self, batch_size: int | None = None, *, parameter_bytes: int | None = None,
                 buffer_bytes: int = 0, rank_bytes: Mapping[str, int | None] | None = None, loss: Any = None) -> str:
        """A few readable lines: devices, replicas per device, shard sizes, chunks and the weighting rule.

        With ``parameter_bytes`` (and ``buffer_bytes``) of the module, a device holding several replicas also
        shows what the copies cost there (``shared_device_memory``). ``rank_bytes``: what this rank holds of
        ``{'parameters': ..., 'gradients': ..., 'optimizer state': ...}`` under sharding (``None``: not known yet).
        ``loss``: the loss of the steps (``losses.describe_loss``): the weighting rule is its normalizer's, and a
        loss flowpipe cannot place gets one line saying it is exact only as a mean over items.
        """
        divisor, caveat = describe_loss(loss) if loss is not None else (None, None)
        lines = [f'DevicePlan: {self._placement()}']
        if self.engine in (DISTRIBUTED, SHARDED) and self.mesh is not None:
            lines.append(f'  {self.mesh.describe()}')
        if caveat is not None and (self.num_replicas > 1 or self.microbatch or self.world is not None):
            lines.append(f'  {caveat}')
        lines.extend(self._sharding_lines(rank_bytes))
        lines.extend(self._pipeline_lines())
        lines.extend(self.shared_device_memory(parameter_bytes, buffer_bytes))
        lines.extend(describe_speed(self))
        lines.extend(describe_randomness(self.randomness, self.compile))
        if batch_size is not None:
            lines.extend(self._batch_lines(batch_size, divisor))
        return '\n'.join(lines)

    def _batch_lines(self, batch_size: int, divisor: str | None) -> list[str]:
        """The lines of ``describe`` for a batch of ``batch_size`` items (``divisor``: the loss's normalizer)."""
        if batch_size == 0:
            return ['  batch 0: no items, so no pieces and no optimizer step']
        local, lines = batch_size, self._world_lines(batch_size)
        if self.world is not None:
            local = shard_sizes(batch_size, self.mesh.data_size)[self.mesh.data_rank]
        chunks = self.chunk_sizes(local) if local else ()
        if len(chunks) == 1:
            lines.append(f'  batch {local}: one chunk (no micro-batches)')
        elif chunks:
            lines.append(f'  batch {local}: {len(chunks)} micro-batches of {self.microbatch} '
                         f'-> chunk sizes {list(chunks)}')
        if self.num_replicas > 1:
            for size in sorted(set(chunks), reverse=True):
                shards = self.shard_sizes(size)
                idle = [d.name for d, n in zip(self.devices, shards) if n == 0]
                lines.append(f'  chunk of {size} -> shards {list(shards)} over {", ".join(d.name for d in self.devices)}'
                             + (f' ({", ".join(idle)} idle)' if idle else ''))
        if self.world is None and len(self.pieces(batch_size)) == 1:
            lines.append('  the whole batch in one piece; one optimizer step per batch')
        else:
            summed = 'gradients summed over the ranks' if self.world is not None else 'gradients summed'
            rule = (f'loss of each piece weighted by piece_size / {batch_size}' if divisor is None else
                    f"each piece's loss summed and divided by the whole batch's normalizer ({divisor}), counted "
                    f"before the split")
            lines.append(f'  {rule}; {summed}; one optimizer step per batch')
        return lines

    def replicas_per_device(self) -> dict[str, int]:
        """How many replicas each physical device holds (``'cuda:0'``, ``'cpu'``), in order of first use."""
        counts: dict[str, int] = {}
        if self.engine == REPLICAS:
            for dev in self.devices:
                counts[str(dev.device)] = counts.get(str(dev.device), 0) + 1
        return counts

    def shared_device_memory(self, parameter_bytes: int | None = None, buffer_bytes: int = 0) -> list[str]:
        """One line per physical device holding K > 1 replicas (``'GPU:0x4'``, logical CPU devices): K copies of
        the parameters, gradients and buffers (in MiB when the module's bytes are given) and up to K pieces'
        activations at once; the optimizer state is not multiplied (it lives on the primary only)."""
        lines = []
        for device, count in self.replicas_per_device().items():
            if count < 2:
                continue
            cost = ''
            if parameter_bytes is not None:
                each = 2 * parameter_bytes + buffer_bytes
                cost = f' ({count} x {_mib(each)} = {_mib(count * each)})'
            lines.append(f'  {device} holds {count} replicas: {count}x parameters, gradients and buffers{cost},')
            lines.append(f'    the activations of up to {count} pieces at once (shards of one chunk); the optimizer '
                         f'state once, on the primary')
        return lines

    def _sharding_lines(self, rank_bytes: Mapping[str, int | None] | None) -> list[str]:
        if self.sharding is None:
            return []
        if self.engine != SHARDED:
            return [f'  sharding {self.sharding.mode!r} asked for, in one process: nothing to shard over, the device '
                    f'holds the whole model (sharding applies across the ranks of a distributed job)']
        lines = self.sharding.describe(self.world)
        if rank_bytes:
            held = ', '.join(f'{name} {"not made yet" if size is None else _size(size)}'
                             for name, size in rank_bytes.items())
            lines.append(f'  this rank holds: {held}')
        return lines

    def _pipeline_lines(self) -> list[str]:
        if self.pipeline is None:
            return []
        if self.engine != PIPELINE:
            return [f'  pipeline of {self.pipeline.stages} stages asked for, in one process: nothing to pipeline '
                    f'over, the device holds the whole model (stages are ranks of a distributed job)']
        return self.pipeline.describe()

    def _world_lines(self, batch_size: int) -> list[str]:
        if self.world is None:
            return []
        mesh = self.mesh
        shards = shard_sizes(batch_size, mesh.data_size)
        if mesh.pp == 1:
            return [f'  global batch {batch_size} over {self.world.size} ranks: shards {list(shards)}, '
                    f'this rank (rank {self.world.rank}) computes {shards[self.world.rank]}']
        return [f'  global batch {batch_size} over {mesh.data_size} pipelines: shards {list(shards)}, this rank\'s '
                f'pipeline (ranks {list(mesh.group("pp"))}) computes {shards[mesh.data_rank]}']

    def _placement(self) -> str:
        names = ', '.join(d.name for d in self.devices)
        if self.engine == SINGLE:
            return f'single device {names}'
        if self.engine in (DISTRIBUTED, SHARDED):
            world, kind = self.world, 'sharded data parallel' if self.engine == SHARDED else 'distributed'
            return (f'{kind}, rank {world.rank} of {world.size} (local rank {world.local_rank}), backend '
                    f'{world.backend or "not initialized"}, device {names}')
        if self.engine == PIPELINE:
            return (f'pipeline parallel, stage {self.mesh.coordinate("pp")} of {self.mesh.pp} on rank {self.world.rank} '
                    f'(backend {self.world.backend or "not initialized"}), device {names}; {self.mesh.describe()}')
        if self.engine == MODEL_PARALLEL:
            if self.device_map == AUTO:
                return f'model parallel, parts balanced by parameter bytes over {names}'
            parts = ', '.join(f'{part}->{dev.name}' for part, dev in self.device_map)
            return f'model parallel: {parts}'
        counts = ', '.join(f'{n} on {dev}' for dev, n in self.replicas_per_device().items())
        weights = f', weights {list(self.device_weights)}' if self.device_weights else ''
        return f'{len(self.devices)} replicas (data parallel) on {names} ({counts}){weights}'

    def __str__(self) -> str:
        return self.describe()


def _mib(size: int) -> str:
    return f'{size / 2 ** 20:.1f} MiB'


def _size(size: int) -> str:
    return _mib(size) if size >= 2 ** 20 else f'{size:,} bytes'


def _distributed_plan(device: Any, chunk: int | None, device_weights: Any, device_map: Any, world: World,
                      num_gpus: int | None) -> DevicePlan:
    for name, value in (('device_map', device_map), ('device_weights', device_weights)):
        if value is not None:
            raise ValueError(f'Expected no {name} in a distributed job ({world}): every rank holds one whole replica '
                             f'and takes an equal shard. Received: {name}={value!r}. Drop {name}.')
    return DevicePlan((rank_device(device, world, num_gpus),), chunk, None, None, engine=DISTRIBUTED, world=world)


def make_plan(device: Any = None, microbatch: Any = None, device_weights: Any = None, device_map: Any = None,
              amp: bool | str = False, *, memory_format: Any = None, compile: Any = None, pin_memory: Any = 'auto',
              num_gpus: int | None = None, world: World | None = None, sharding: Any = None,
              sharding_units: Any = None, sharding_group: Any = None, sharding_offload: Any = False,
              randomness: Any = None, pipeline: Any = None, pipeline_split: Any = None,
              pipeline_schedule: Any = None) -> DevicePlan:
    """Turn the user's flags into a frozen :class:`DevicePlan`, the engine kind included.

    The kind: ``'sharded'`` in a distributed job (``world``) with ``sharding``, ``'distributed'`` in one without,
    else ``'model_parallel'`` with a ``device_map``, else ``'replicas'`` for several devices, else ``'single'``. In a distributed job each rank has one device: the
    CPU, or its own GPU (``cuda:LOCAL_RANK`` for one GPU named, the ``LOCAL_RANK``-th of several).

    Args:
        device: a device spec (see ``flowpipe.parallel.devices``); several devices mean replicas.
        microbatch: items per micro-batch (int), or ``None``/``False`` for whole batches.
        device_weights: positive relative shard sizes, one per device (for unequal devices).
        device_map: ``{child_name: device}`` for model parallel, or ``'auto'`` to balance the top-level
            children over ``device`` by parameter bytes.
        amp: mixed precision: ``True`` (float16 with a gradient scaler on CUDA, bfloat16 on a CPU),
            ``'bfloat16'``, ``'float16'`` (CUDA only) or ``False``.
        memory_format: ``'channels_last'``, ``'auto'``, or ``None`` / ``'contiguous'`` for inputs as given.
        compile: ``True`` or a dict of ``torch.compile`` options; ``False`` / ``None`` off.
        pin_memory: ``'auto'`` (pinned when a device is a GPU), ``True`` (needs a GPU) or ``False``.
        num_gpus: visible GPU count, ``None`` to ask torch (tests pass a number).
        world: this process's place in a distributed job (``flowpipe.parallel.distributed.current()``), or ``None``.
        sharding, sharding_units, sharding_group, sharding_offload: shard the model over the ranks of a distributed
            job (kind ``'sharded'``; see ``flowpipe.parallel.sharding``). In one process a sharding is kept in the
            plan and changes nothing (one device holds the whole model); with several devices it is an error.
            Under sharding ``amp=True`` on a GPU is ``'bfloat16'`` (FSDP's mixed precision: bfloat16 compute,
            float32 reduction); ``'float16'`` is refused.
        randomness: ``'by_item'`` (dropout masks keyed by item: the same on every layout) or ``'torch'`` (torch's
            generators, one stream per piece); ``None``: the default (``'torch'`` for a compiled model), see
            ``flowpipe.parallel.item_random.check_randomness``.
        pipeline, pipeline_split, pipeline_schedule: cut the network into stages over the ranks of a distributed
            job (kind ``'pipeline'``; see ``flowpipe.parallel.stages``); in one process kept in the plan, changing
            nothing.

    Raises:
        TypeError, ValueError: malformed flags; ``DeviceError``: a device that is not available.
    """
    chunk = check_microbatch(microbatch)
    plan = _placement(device, chunk, device_weights, device_map, num_gpus, world)
    shards = make_sharding(sharding, sharding_units, sharding_group, sharding_offload, world)
    options = {'amp': check_amp(amp, plan.devices), 'memory_format': check_memory_format(memory_format),
               'compile': check_compile(compile), 'pin_memory': check_pin_memory(pin_memory, plan.devices)}
    options['randomness'] = check_randomness(randomness, options['compile'])
    if shards is not None:
        options.update(_sharded(plan, shards, amp, options['amp']))
    stages = make_pipelining(pipeline, pipeline_split, pipeline_schedule)
    if stages is not None:
        options.update(_pipelined(plan, stages, shards))
    options['mesh'] = make_mesh(world, plan.num_replicas, stages and stages.stages,
                                None if shards is None or world is None else shards.mesh_shape(world.size))
    return dataclasses.replace(plan, **options)


def _pipelined(plan: DevicePlan, stages: Pipelining, shards: Sharding | None) -> dict[str, Any]:
    """The plan's fields with a pipeline: its kind in a distributed job (one device per rank)."""
    if plan.engine not in (SINGLE, DISTRIBUTED) or shards is not None and plan.engine == DISTRIBUTED:
        what = f'sharding={shards.mode!r}' if shards is not None else f'{plan.engine} on {[d.name for d in plan.devices]}'
        raise ValueError(f"Expected a pipeline in a distributed job (one device per process, no sharding) or one "
                         f"process on one device. Received: pipeline={stages.stages} with {what}. Drop one of them.")
    return {'engine': PIPELINE if plan.engine == DISTRIBUTED else plan.engine, 'pipeline': stages}


def _sharded(plan: DevicePlan, shards: Sharding, amp: Any, checked_amp: bool | str) -> dict[str, Any]:
    """The plan's fields under sharding: its kind in a distributed job, and amp as FSDP's precision takes it."""
    if plan.engine not in (SINGLE, DISTRIBUTED):
        names = [dev.name for dev in plan.devices]
        raise ValueError(f'Expected sharding in a distributed job (one device per process) or one process on one '
                         f'device. Received: sharding={shards.mode!r} with {plan.engine} on {names}. Start one '
                         f'process per device (torchrun, flowpipe.parallel.launch) with device=\'GPU:*\'.')
    cuda = plan.primary.device.type == 'cuda'
    if cuda and checked_amp == 'float16':
        if amp is not True:
            raise ValueError(f"Expected amp=True or 'bfloat16' under sharding (FSDP's mixed precision computes in "
                             f"bfloat16 and reduces in float32; no loss scaling). Received: amp={amp!r}.")
        checked_amp = 'bfloat16'
    kind = SHARDED if plan.engine == DISTRIBUTED else plan.engine
    return {'engine': kind, 'sharding': shards, 'amp': checked_amp}


def _placement(device: Any, chunk: int | None, device_weights: Any, device_map: Any,
               num_gpus: int | None, world: World | None = None) -> DevicePlan:
    """The plan's devices, split rule and engine kind (every other field at its default)."""
    if world is not None and world.size > 1:
        return _distributed_plan(device, chunk, device_weights, device_map, world, num_gpus)
    if device_map is None:
        devices = parse_devices(device, num_gpus)
        kind = REPLICAS if len(devices) > 1 else SINGLE
        return DevicePlan(devices, chunk, check_weights(device_weights, devices), None, engine=kind)
    if device_weights is not None:
        raise ValueError(f'Expected device_weights only with replicas. Received: device_weights={device_weights!r} '
                         f'with device_map={device_map!r}; a model-parallel model has one replica.')
    if isinstance(device_map, str):
        if device_map.lower() != AUTO:
            raise ValueError(f"Expected device_map as a mapping {{part: device}} or 'auto'. Received: {device_map!r}.")
        return DevicePlan(parse_devices(device, num_gpus), chunk, None, AUTO, engine=MODEL_PARALLEL)
    if not isinstance(device_map, Mapping):
        raise TypeError(f"Expected device_map as a mapping {{part: device}} or 'auto'. "
                        f'Received: {device_map!r} of type {type(device_map).__name__}.')
    parts, devices = parse_device_map(device_map, device, num_gpus)
    return DevicePlan(devices, chunk, None, parts, engine=MODEL_PARALLEL)
