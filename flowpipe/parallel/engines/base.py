"""What every engine shares: the step result, batch checks, moving pieces to devices, one piece's
forward/backward, and the optimizer step with or without a gradient scaler.

An engine owns the placement of one ``nn.Module`` (and its replicas) and runs training and prediction steps
on sequences of batch-first tensors. It knows nothing of pipelines, batches or configs.
"""
from __future__ import annotations

import contextlib
import itertools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import nn

from ..plan import DevicePlan
from ..split import Piece

__all__ = ['Engine', 'StepResult']

Tensors = Sequence[torch.Tensor]


@dataclass(frozen=True)
class StepResult:
    """The outcome of one training step: the full-batch ``loss`` and, when asked, ``outputs`` in batch order."""

    loss: float
    outputs: Any = None


def as_batch(tensors: Any, name: str) -> list[torch.Tensor]:
    """Accept one tensor or a sequence of tensors (numpy arrays are converted) as a list of tensors."""
    if isinstance(tensors, torch.Tensor) or hasattr(tensors, '__array__'):
        tensors = [tensors]
    if not isinstance(tensors, (list, tuple)):
        raise TypeError(f'Expected {name} as a sequence of batch-first tensors. '
                        f'Received: {tensors!r} of type {type(tensors).__name__}.')
    return [t if isinstance(t, torch.Tensor) else torch.as_tensor(t) for t in tensors]


def batch_size_of(inputs: list[torch.Tensor], targets: list[torch.Tensor]) -> int:
    """The common length of dimension 0; a clear error when tensors disagree or the batch is empty."""
    if not inputs:
        raise ValueError('Expected at least one input tensor. Received: an empty inputs sequence.')
    sizes = [t.shape[0] if t.dim() else None for t in (*inputs, *targets)]
    if len(set(sizes)) != 1 or sizes[0] is None:
        raise ValueError(f'Expected batch-first tensors of one length. Received dimension-0 sizes {sizes} '
                         f'(inputs first, then targets).')
    if sizes[0] == 0:
        raise ValueError('Expected a non-empty batch. Received tensors with 0 items.')
    return sizes[0]


def floating_dtype(module: nn.Module) -> torch.dtype | None:
    """The dtype of the module's first floating parameter (inputs are cast to it), ``None`` if it has none."""
    # lazily: the first floating parameter ends the search, so a step does not walk the whole module
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def set_mode(modules: Sequence[nn.Module], training: bool) -> None:
    """Put ``modules`` in training (or evaluation) mode unless their top-level flags already say so.

    ``Module.train()`` walks every submodule (about as long as a small layer's forward), so it is skipped when
    nothing changed. Only the top-level flag is read: a submodule the user switched to evaluation mode inside a
    training module (a frozen BatchNorm) stays so until the next switch from evaluation mode to training.
    """
    if any(module.training is not training for module in modules):
        for module in modules:
            module.train(training)


def move(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None,
         piece: Piece | None = None) -> torch.Tensor:
    """Slice a piece out of a batch tensor and move it; floating tensors take ``dtype``, others keep theirs."""
    whole = piece is None or (piece.start == 0 and piece.stop == tensor.shape[0])
    part = tensor if whole else tensor[piece.start:piece.stop]
    cast = dtype if dtype is not None and part.is_floating_point() and part.dtype != dtype else None
    if cast is None and part.device == device:
        return part
    # non-blocking only towards a GPU: a non-blocking copy to the CPU may be read before it lands
    return part.to(device=device, dtype=cast, non_blocking=device.type == 'cuda')


def device_of(outputs: Any, default: torch.device) -> torch.device:
    """Where the (first tensor of the) outputs live: targets are moved there for the loss."""
    if isinstance(outputs, torch.Tensor):
        return outputs.device
    if isinstance(outputs, (list, tuple)) and outputs:
        return device_of(outputs[0], default)
    if isinstance(outputs, dict) and outputs:
        return device_of(next(iter(outputs.values())), default)
    return default


def to_device(outputs: Any, device: torch.device) -> Any:
    """Detach and move a tensor or a (nested) tuple/list/dict of tensors."""
    if isinstance(outputs, torch.Tensor):
        return outputs.detach().to(device)
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(to_device(o, device) for o in outputs)
    if isinstance(outputs, dict):
        return {k: to_device(v, device) for k, v in outputs.items()}
    return outputs


def concat(parts: list[Any]) -> Any:
    """Concatenate per-piece outputs along dimension 0, keeping the structure of one output."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts) if len(parts) > 1 else first
    if isinstance(first, (list, tuple)):
        return type(first)(concat([p[i] for p in parts]) for i in range(len(first)))
    if isinstance(first, dict):
        return {k: concat([p[k] for p in parts]) for k in first}
    return parts


def autocast(enabled: bool, device: torch.device) -> contextlib.AbstractContextManager:
    """CUDA autocast when mixed precision is on, else a no-op."""
    if enabled and device.type == 'cuda':
        return torch.autocast(device_type='cuda')
    return contextlib.nullcontext()


class Engine:
    """The interface of every engine (single device, replicas, model parallel).

    Subclasses implement ``train_step``, ``predict`` and ``module``; ``train_step`` puts the replicas in
    training mode and ``predict`` in evaluation mode.
    """

    def __init__(self, plan: DevicePlan):
        self.plan = plan
        self.amp = plan.amp and plan.primary.device.type == 'cuda'
        if plan.amp and not self.amp:
            warnings.warn('amp=True is ignored on CPU: mixed precision needs a CUDA device. '
                          'Training runs in the parameters\' dtype.', RuntimeWarning, stacklevel=3)
        self.scaler = torch.amp.GradScaler('cuda') if self.amp else None
        self._pieces: dict[int, tuple[Piece, ...]] = {}
        if self.scaler is not None:
            # create the scale on the primary now, not lazily inside whichever replica thread comes first
            self.scaler.scale(torch.zeros((), device=plan.primary.device))

    @property
    def module(self) -> nn.Module:
        """The primary replica: it holds the truth (``state_dict``, the optimizer's parameters)."""
        raise NotImplementedError

    def parameters(self) -> Iterator[nn.Parameter]:
        """The primary's parameters: build the optimizer on these."""
        return self.module.parameters()

    def state_dict(self) -> dict:
        """The primary module's ``state_dict``."""
        return self.module.state_dict()

    def train_step(self, inputs: Tensors, targets: Tensors, loss_fn: Callable, optimizer: torch.optim.Optimizer,
                   *, return_outputs: bool = False) -> StepResult:
        """One optimizer step on a whole batch, however the plan splits it."""
        raise NotImplementedError

    def predict(self, inputs: Tensors) -> Any:
        """Outputs for a batch, in batch order, without gradients."""
        raise NotImplementedError

    def sync(self) -> None:
        """Copy the primary's parameters and buffers to the replicas (after loading weights)."""

    def close(self) -> None:
        """Release worker threads; the engine must not be used afterwards."""

    def __enter__(self) -> 'Engine':
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f'{type(self).__name__}({self.plan.describe()})'

    def pieces(self, batch_size: int) -> tuple[Piece, ...]:
        """The plan's pieces of a batch, computed once per batch size (the plan is frozen)."""
        pieces = self._pieces.get(batch_size)
        if pieces is None:
            pieces = self._pieces[batch_size] = self.plan.pieces(batch_size)
        return pieces

    def run_piece(self, module: nn.Module, device: torch.device, piece: Piece, batch: tuple, loss_fn: Callable,
                  keep_outputs: bool) -> tuple[torch.Tensor, Any]:
        """Forward and backward of one piece on one replica; returns (weighted loss, detached outputs)."""
        inputs, targets, dtype = batch
        with autocast(self.amp, device):
            outputs = module(*[move(t, device, dtype, piece) for t in inputs])
            out_device = device_of(outputs, device)
            loss = loss_fn(outputs, *[move(t, out_device, dtype, piece) for t in targets])
        weighted = loss.float() if self.amp else loss
        if piece.weight != 1.0:     # a whole batch in one piece: multiplying by one is exact, and wasted work
            weighted = weighted * piece.weight
        (self.scaler.scale(weighted) if self.scaler else weighted).backward()
        return weighted.detach(), to_device(outputs, out_device) if keep_outputs else None

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """The one optimizer step of a batch (through the scaler under mixed precision)."""
        if self.scaler is None:
            optimizer.step()
        else:
            self.scaler.step(optimizer)
            self.scaler.update()
