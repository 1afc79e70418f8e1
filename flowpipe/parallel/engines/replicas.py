"""Data parallel in one process: N replicas of one module, each batch split across them.

A step: every replica runs forward/backward on its pieces (one per micro-batch chunk), concurrently, each
piece's loss weighted by ``piece_size / batch_size``; the replicas' gradients are summed onto the primary; the
optimizer steps once; parameters are copied back to the replicas and floating buffers (BatchNorm running
statistics) are averaged over the replicas that saw data, then copied back. Not ``nn.DataParallel``: the
replicas persist between steps and nothing is re-scattered but the data.
"""
from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from torch import nn

from ..plan import DevicePlan
from ..split import Piece
from .base import (Engine, StepResult, Tensors, as_batch, autocast, batch_size_of, concat, floating_dtype, move,
                   set_mode, to_device)
from .workers import ReplicaWorkers

__all__ = ['ReplicaEngine']


class ReplicaEngine(Engine):
    """Replicas on ``plan.devices``: deep copies of ``module``, the primary (``module`` itself) first.

    Replica 0 runs in the caller's thread; every other replica runs on its own daemon worker thread (and its
    own CUDA stream on a GPU). Call ``close()`` (or use the engine as a context manager) to stop the threads.
    """

    def __init__(self, module: nn.Module, plan: DevicePlan):
        super().__init__(plan)
        self.devices = [dev.device for dev in plan.devices]
        primary = module.to(self.devices[0])
        self.replicas = [primary] + [copy.deepcopy(primary).to(dev) for dev in self.devices[1:]]
        self._params = [list(replica.parameters()) for replica in self.replicas]
        self._buffers = [list(replica.buffers()) for replica in self.replicas]
        self._streams = [torch.cuda.Stream(dev) if dev.type == 'cuda' else None for dev in self.devices]
        self._workers = ReplicaWorkers(len(self.replicas) - 1)

    @property
    def module(self) -> nn.Module:
        """The primary replica: the optimizer's parameters and the ``state_dict`` live here."""
        return self.replicas[0]

    def train_step(self, inputs: Tensors, targets: Tensors, loss_fn: Callable, optimizer: torch.optim.Optimizer,
                   *, return_outputs: bool = False) -> StepResult:
        """One optimizer step on the whole batch, split across the replicas and micro-batches.

        Arguments as in ``SingleEngine.train_step``; outputs come back in batch order on the primary device.
        """
        inputs, targets = as_batch(inputs, 'inputs'), as_batch(targets, 'targets')
        size = batch_size_of(inputs, targets)
        batch = (inputs, targets, floating_dtype(self.module))
        optimizer.zero_grad(set_to_none=True)
        set_mode(self.replicas, True)
        for replica in self.replicas:
            replica.zero_grad(set_to_none=True)

        def work(index: int, pieces: list[Piece]) -> list[tuple[torch.Tensor, Any]]:
            replica, device = self.replicas[index], self.devices[index]
            return [self.run_piece(replica, device, piece, batch, loss_fn, return_outputs) for piece in pieces]

        results = self._run(self.pieces(size), work)
        self._reduce_gradients(sorted(results))
        self.step(optimizer)
        self._broadcast(sorted(results))
        ordered = self._in_batch_order(results)
        total = float(torch.stack([loss.to(self.devices[0]) for loss, _ in ordered]).sum())
        outputs = concat([to_device(out, self.devices[0]) for _, out in ordered]) if return_outputs else None
        return StepResult(total, outputs)

    def predict(self, inputs: Tensors) -> Any:
        """Outputs of the whole batch in evaluation mode, in batch order, on the primary device."""
        inputs = as_batch(inputs, 'inputs')
        size = batch_size_of(inputs, [])
        dtype = floating_dtype(self.module)
        set_mode(self.replicas, False)

        def work(index: int, pieces: list[Piece]) -> list[Any]:
            replica, device = self.replicas[index], self.devices[index]
            with torch.no_grad(), autocast(self.amp, device):
                return [replica(*[move(t, device, dtype, piece) for t in inputs]) for piece in pieces]

        results = self._run(self.pieces(size), work)
        return concat([to_device(out, self.devices[0]) for out in self._in_batch_order(results)])

    def sync(self) -> None:
        """Copy the primary's parameters and buffers to every replica (after loading weights)."""
        self._broadcast([0])

    def close(self) -> None:
        """Stop the worker threads."""
        self._workers.close()

    def _run(self, pieces: tuple[Piece, ...], work: Callable) -> dict[int, tuple[list[Piece], list]]:
        """Run ``work(replica, its pieces)`` on every replica that has pieces; re-raise the first failure."""
        assigned: dict[int, list[Piece]] = {}
        for piece in pieces:
            assigned.setdefault(piece.replica, []).append(piece)
        futures = {index: self._workers.submit(index - 1, self._on_stream(index, work, chunk))
                   for index, chunk in assigned.items() if index > 0}
        results, error = {}, None
        if 0 in assigned:
            try:
                results[0] = (assigned[0], work(0, assigned[0]))
            except BaseException as failure:  # noqa: BLE001 - wait for the workers before re-raising
                error = failure
        for index, future in futures.items():
            try:
                results[index] = (assigned[index], future.result())
            except BaseException as failure:  # noqa: BLE001
                error = error or failure
        if error is not None:
            raise error
        return results

    def _on_stream(self, index: int, work: Callable, pieces: list[Piece]) -> Callable[[], list]:
        """Wrap a replica's work so that on a GPU it runs on the replica's own stream, finished on return."""
        stream = self._streams[index]
        if stream is None:
            return lambda: work(index, pieces)

        def on_stream() -> list:
            with torch.cuda.device(stream.device), torch.cuda.stream(stream):
                stream.wait_stream(torch.cuda.default_stream(self.devices[0]))
                stream.wait_stream(torch.cuda.default_stream(stream.device))
                result = work(index, pieces)
            stream.synchronize()
            return result
        return on_stream

    @staticmethod
    def _in_batch_order(results: dict[int, tuple[list[Piece], list]]) -> list:
        pairs = [(piece.start, value) for pieces, values in results.values() for piece, value in zip(pieces, values)]
        return [value for _, value in sorted(pairs, key=lambda pair: pair[0])]

    @torch.no_grad()
    def _reduce_gradients(self, active: list[int]) -> None:
        """Sum the replicas' gradients onto the primary, in replica order."""
        for i, param in enumerate(self._params[0]):
            for index in active:
                grad = self._params[index][i].grad
                if index == 0 or grad is None:
                    continue
                if param.grad is None:
                    param.grad = grad.to(param.device, copy=True)
                else:
                    param.grad.add_(grad.to(param.device))

    @torch.no_grad()
    def _broadcast(self, active: list[int]) -> None:
        """Average floating buffers over ``active`` replicas onto the primary, then copy the primary everywhere.

        Integer buffers (e.g. ``num_batches_tracked``) are taken from the first active replica.
        """
        primary_buffers = self._buffers[0]
        for j, buffer in enumerate(primary_buffers):
            values = [self._buffers[index][j].to(buffer.device) for index in active]
            if buffer.is_floating_point() and len(values) > 1:
                buffer.copy_(torch.stack(values).mean(dim=0))
            else:
                buffer.copy_(values[0])
        for index in range(1, len(self.replicas)):
            for target, source in zip(self._params[index], self._params[0]):
                target.copy_(source)
            for target, source in zip(self._buffers[index], primary_buffers):
                target.copy_(source)
