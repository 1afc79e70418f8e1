"""Placement parts: where an engine's module and its copies live, and how the copies run their pieces.

A placement holds ``replicas`` (the modules the pieces run on, the primary first: it holds the optimizer's
parameters) and ``devices`` (where each replica's inputs go); ``run(groups, work)`` runs each replica's pieces,
``clear_grads()`` clears the copies' gradients before a batch, ``close()`` releases what it started and
``describe(engine, batch_size, loss)`` gives the readable placement.

Kinds: ``OneDevice``; ``Replicas`` (deep copies of the module on the plan's devices, each on its own thread and, on a
GPU, its own CUDA stream); ``ModelParallel`` (the module's top-level children on devices, a mapping of child name to
device); a pipeline's stage is ``stage_placement.StagePlacement``.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch
from torch import nn

from ..model_parallel import place_module
from ..split import Piece
from .cuda import device_context, ready_event, run_on_stream
from .workers import ReplicaWorkers

if TYPE_CHECKING:
    from .base import Engine

__all__ = ['ModelParallel', 'OneDevice', 'Placement', 'Replicas']

Groups = Mapping[int, Sequence[Piece]]


class Placement:
    """``replicas`` on ``devices``, their pieces run in turn in this thread, with each replica's device current on
    a GPU (user code allocating on ``'cuda'`` lands there)."""

    def __init__(self, replicas: Sequence[nn.Module], devices: Sequence[torch.device]):
        self.replicas, self.devices = list(replicas), list(devices)

    @property
    def module(self) -> nn.Module:
        """The primary replica: it holds the truth (``state_dict``, the optimizer's parameters)."""
        return self.replicas[0]

    def run(self, groups: Groups, work: Callable[[int, Sequence[Piece]], list]) -> dict[int, list]:
        """``{replica: work(replica, its pieces)}`` for every replica in ``groups``."""
        results = {}
        for replica, pieces in groups.items():
            with device_context(self.devices[replica]):
                results[replica] = work(replica, pieces)
        return results

    def clear_grads(self) -> None:
        """Clear the copies' gradients before a batch: none here (the optimizer clears the primary's)."""

    def close(self) -> None:
        """Release what the placement started: nothing here."""

    def describe(self, engine: 'Engine', batch_size: int | None, loss: Any) -> str:
        """The plan's description, with the sizes of the module's parameters and buffers."""
        return engine.plan.describe(batch_size, parameter_bytes=_bytes(self.module.parameters()),
                                    buffer_bytes=_bytes(self.module.buffers()), loss=loss)


class OneDevice(Placement):
    """``module``, moved to the plan's device."""

    def __init__(self, module: nn.Module, plan: Any):
        device = plan.primary.device
        super().__init__([module.to(device)], [device])


class Replicas(Placement):
    """Replicas on ``plan.devices``: deep copies of ``module``, the primary (``module`` itself) first.

    Replica 0 runs in the caller's thread; every other replica runs on its own daemon worker thread; on a GPU each
    replica, the primary included, runs on its own CUDA stream. The devices may mix GPUs and the CPU. ``close()``
    stops the threads. A step that raises stops the threads too (a failed run leaves none behind); the next step
    starts new ones.
    """

    def __init__(self, module: nn.Module, plan: Any):
        devices = [dev.device for dev in plan.devices]
        primary = module.to(devices[0])
        super().__init__([primary] + [copy.deepcopy(primary).to(dev) for dev in devices[1:]], devices)
        self.streams = [torch.cuda.Stream(dev) if dev.type == 'cuda' else None for dev in self.devices]
        self.workers = ReplicaWorkers(len(self.replicas) - 1)
        self._closed = False

    def run(self, groups: Groups, work: Callable[[int, Sequence[Piece]], list]) -> dict[int, list]:
        """Replica 0's work in this thread, the others' on their threads, concurrently; re-raise the first error.

        On a GPU every replica, the primary included, runs on its own stream after an event recorded here before
        any replica starts, with its device current. After an error the worker threads are stopped (the next call
        starts new ones).
        """
        if self.workers.closed and not self._closed:
            self.workers = ReplicaWorkers(len(self.replicas) - 1)
        ready = {replica: ready_event(self.devices[replica]) for replica in groups}
        futures = {replica: self.workers.submit(replica - 1, self._job(replica, work, pieces, ready[replica]))
                   for replica, pieces in groups.items() if replica > 0}
        results, error = {}, None
        if 0 in groups:
            try:
                results[0] = self._job(0, work, groups[0], ready[0])()
            except BaseException as failure:  # noqa: BLE001 - wait for the workers before re-raising
                error = failure
        for replica, future in futures.items():
            try:
                results[replica] = future.result()
            except BaseException as failure:  # noqa: BLE001
                error = error or failure
        if error is not None:
            self.workers.close()
            raise error
        return results

    def _job(self, index: int, work: Callable, pieces: Sequence[Piece], ready: torch.cuda.Event | None
             ) -> Callable[[], list]:
        """A replica's work as a call: on a GPU on the replica's own stream, after ``ready``, finished on return."""
        stream = self.streams[index]
        return lambda: run_on_stream(stream, ready, lambda: work(index, pieces))

    def clear_grads(self) -> None:
        """Clear every replica's gradients."""
        for replica in self.replicas:
            replica.zero_grad(set_to_none=True)

    def close(self) -> None:
        """Stop the worker threads; no step can run afterwards."""
        self._closed = True
        self.workers.close()


class ModelParallel(Placement, Mapping):
    """``module``, its top-level children placed as ``plan.device_map`` says: a mapping ``{child_name: device}``.

    Inputs go to the first device of the map; a hook on each child moves its inputs to the child's device.
    """

    def __init__(self, module: nn.Module, plan: Any):
        self._devices_of = place_module(module, plan)
        super().__init__([module], [plan.primary.device])

    def __getitem__(self, name: str) -> Any:
        return self._devices_of[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._devices_of)

    def __len__(self) -> int:
        return len(self._devices_of)

    def describe(self, engine: 'Engine', batch_size: int | None, loss: Any) -> str:
        """The plan's description with the placement of every part (``'auto'`` included) and its size."""
        first, *rest = engine.plan.describe(batch_size, loss=loss).splitlines()
        children = dict(self.module.named_children())
        parts = []
        for name, device in self.items():
            count = sum(p.numel() for p in children[name].parameters())
            size = _bytes([*children[name].parameters(), *children[name].buffers()])
            parts.append(f'  {name} on {device.name}: {count:,} parameters, {_size(size)} with buffers')
        return '\n'.join([first, *parts, *rest])


def _bytes(tensors: Any) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors)


def _size(nbytes: int) -> str:
    return f'{nbytes / 1024:.1f} KiB' if nbytes < 2 ** 20 else f'{nbytes / 2 ** 20:.1f} MiB'
