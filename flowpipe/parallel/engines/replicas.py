"""Data parallel in one process: N replicas of one module, each batch split across them.

A step: every replica runs forward/backward on its pieces (one per micro-batch chunk), concurrently, each
piece's loss weighted by ``piece_size / batch_size``; the replicas' gradients are summed onto the primary; the
optimizer steps once; parameters are copied back to the replicas and floating buffers (BatchNorm running
statistics) are averaged over the replicas that saw data, then copied back. Not ``nn.DataParallel``: the
replicas persist between steps and nothing is re-scattered but the data.
"""
from __future__ import annotations

import copy
from typing import Callable, Sequence

import torch
from torch import nn

from ..plan import DevicePlan
from ..precision import Precision
from ..split import Piece
from . import reduce
from .base import Engine, Groups
from .cuda import ready_event, run_on_stream
from .workers import ReplicaWorkers

__all__ = ['ReplicaEngine']


class ReplicaEngine(Engine):
    """Replicas on ``plan.devices``: deep copies of ``module``, the primary (``module`` itself) first.

    Replica 0 runs in the caller's thread; every other replica runs on its own daemon worker thread; on a GPU each
    replica, the primary included, runs on its own CUDA stream. The devices may mix GPUs and the CPU. Call
    ``close()`` (or use the engine as a context manager) to stop the threads. A step that raises stops the
    threads too (a failed run leaves none behind); the next step starts new ones.
    """

    def __init__(self, module: nn.Module, plan: DevicePlan, precision: Precision | None = None):
        devices = [dev.device for dev in plan.devices]
        primary = module.to(devices[0])
        replicas = [primary] + [copy.deepcopy(primary).to(dev) for dev in devices[1:]]
        super().__init__(plan, replicas, devices, precision)
        self._params = [list(replica.parameters()) for replica in self.replicas]
        self._buffers = [list(replica.buffers()) for replica in self.replicas]
        self._state = [params + buffers for params, buffers in zip(self._params, self._buffers)]
        self._streams = [torch.cuda.Stream(dev) if dev.type == 'cuda' else None for dev in self.devices]
        self._workers = ReplicaWorkers(len(self.replicas) - 1)
        self._closed = False

    def run_replicas(self, groups: Groups, work: Callable[[int, Sequence[Piece]], list]) -> dict[int, list]:
        """Replica 0's work in this thread, the others' on their threads, concurrently; re-raise the first error.

        On a GPU every replica, the primary included, runs on its own stream after an event recorded here before
        any replica starts, with its device current (so user code allocating on ``'cuda'`` lands on it). After an
        error the worker threads are stopped (the next call starts new ones).
        """
        if self._workers.closed and not self._closed:
            self._workers = ReplicaWorkers(len(self.replicas) - 1)
        ready = {replica: ready_event(self.devices[replica]) for replica in groups}
        futures = {replica: self._workers.submit(replica - 1, self._job(replica, work, pieces, ready[replica]))
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
            self._workers.close()
            raise error
        return results

    def zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Clear the optimizer's gradients and every replica's."""
        optimizer.zero_grad(set_to_none=True)
        for replica in self.replicas:
            replica.zero_grad(set_to_none=True)

    def close(self) -> None:
        """Stop the worker threads; the engine cannot run steps afterwards."""
        self._closed = True
        self._workers.close()

    def _job(self, index: int, work: Callable, pieces: Sequence[Piece], ready: torch.cuda.Event | None
             ) -> Callable[[], list]:
        """A replica's work as a call: on a GPU on the replica's own stream, after ``ready``, finished on return."""
        stream = self._streams[index]
        return lambda: run_on_stream(stream, ready, lambda: work(index, pieces))

    def reduce_gradients(self, active: tuple[int, ...]) -> None:
        """Sum the active replicas' gradients onto the primary, in replica order, coalesced (``engines.reduce``)."""
        reduce.reduce_gradients(self._params, active, self.devices)

    def share_parameters(self) -> None:
        """Copy the primary's parameters (SAM's perturbed weights) to every replica, coalesced."""
        reduce.broadcast(self._params, self.devices)

    def broadcast(self, active: tuple[int, ...]) -> None:
        """Average floating buffers over ``active`` replicas onto the primary, then copy the primary everywhere.

        Integer buffers (e.g. ``num_batches_tracked``) are taken from the first active replica. Both run coalesced
        (``engines.reduce``).
        """
        reduce.average_buffers(self._buffers, active)
        reduce.broadcast(self._state, self.devices)
