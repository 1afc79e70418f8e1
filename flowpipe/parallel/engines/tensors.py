"""Batch-first tensors of a step: checks, the compute dtype, slicing a piece to a device, outputs in batch order.

Pure helpers shared by every engine; none of them knows about replicas or optimizers.
"""
from __future__ import annotations

import contextlib
import itertools
from typing import Any, Callable, Iterator, NamedTuple, Sequence

import torch
from torch import nn

from ..split import Piece

__all__ = ['BatchTensors', 'as_batch', 'batch_size_of', 'concat', 'device_of', 'evaluating', 'first_floating',
           'local_shard', 'move', 'planned_batch', 'prepare_batch', 'set_mode', 'target_devices', 'to_device']


class BatchTensors(NamedTuple):
    """A checked batch: ``inputs`` and ``targets`` (lists of batch-first tensors), their common ``size``, and the
    ``dtype`` floating inputs and targets are cast to (the module's, ``None`` without floating parameters)."""

    inputs: list[torch.Tensor]
    targets: list[torch.Tensor]
    size: int
    dtype: torch.dtype | None


def prepare_batch(inputs: Any, targets: Any, dtype: torch.dtype | None) -> BatchTensors:
    """Check a step's inputs and targets (see ``as_batch``, ``batch_size_of``); ``dtype`` for floating ones."""
    inputs, targets = as_batch(inputs, 'inputs'), as_batch(targets, 'targets')
    return BatchTensors(inputs, targets, batch_size_of(inputs, targets), dtype)


def planned_batch(batch: BatchTensors, plan: Any, pin: Callable[[torch.Tensor], torch.Tensor]) -> BatchTensors:
    """``batch`` as ``plan`` wants it: with ``plan.pin_memory`` its tensors through ``pin`` (host tensors pinned,
    once per batch); with ``memory_format='channels_last'`` given explicitly, an error when no input is 4-D."""
    if plan.pin_memory:
        batch = batch._replace(inputs=[pin(t) for t in batch.inputs], targets=[pin(t) for t in batch.targets])
    if plan.memory_format == 'channels_last' and not any(t.dim() == 4 for t in batch.inputs):
        shapes = [tuple(t.shape) for t in batch.inputs]
        raise ValueError(f"Expected a 4-D (N, C, H, W) input for memory_format='channels_last'. Received: "
                         f"inputs of shapes {shapes}. Use memory_format='auto' or None for this model.")
    return batch


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


def first_floating(module: nn.Module) -> torch.Tensor | None:
    """The module's first floating parameter (else buffer): inputs are cast to its dtype; ``None`` if none."""
    # lazily: the first floating parameter ends the search, so the whole module is not walked
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        if tensor.is_floating_point():
            return tensor
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


@contextlib.contextmanager
def evaluating(module: nn.Module) -> Iterator[None]:
    """``module`` in evaluation mode inside; on the way out every submodule's own mode as it was."""
    modes = [(sub, sub.training) for sub in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for sub, training in modes:
            sub.training = training


def local_shard(tensor: torch.Tensor) -> torch.Tensor:
    """A ``DTensor``'s local shard (sharing its storage: in-place changes reach the ``DTensor``); another tensor as
    it is."""
    to_local = getattr(tensor, 'to_local', None)
    return tensor if to_local is None else to_local()


def move(tensor: torch.Tensor, device: torch.device, dtype: torch.dtype | None, piece: Piece | None = None,
         memory_format: torch.memory_format | None = None) -> torch.Tensor:
    """Slice a piece out of a batch tensor and move it; floating tensors take ``dtype``, others keep theirs;
    4-D tensors take ``memory_format`` when one is given (one copy does all three)."""
    whole = piece is None or (piece.start == 0 and piece.stop == tensor.shape[0])
    part = tensor if whole else tensor[piece.start:piece.stop]
    cast = dtype if dtype is not None and part.is_floating_point() and part.dtype != dtype else None
    layout = memory_format if memory_format is not None and part.dim() == 4 else None
    if cast is None and part.device == device and (layout is None or part.is_contiguous(memory_format=layout)):
        return part
    # non-blocking only towards a GPU: a non-blocking copy to the CPU may be read before it lands
    if layout is None:
        return part.to(device=device, dtype=cast, non_blocking=device.type == 'cuda')
    return part.to(device=device, dtype=cast, non_blocking=device.type == 'cuda', memory_format=layout)


def device_of(outputs: Any, default: torch.device) -> torch.device:
    """Where the (first tensor of the) outputs live: targets are moved there for the loss."""
    if isinstance(outputs, torch.Tensor):
        return outputs.device
    if isinstance(outputs, (list, tuple)) and outputs:
        return device_of(outputs[0], default)
    if isinstance(outputs, dict) and outputs:
        return device_of(next(iter(outputs.values())), default)
    return default


def target_devices(outputs: Any, count: int, first: torch.device) -> list[torch.device]:
    """Where each of ``count`` targets goes for the loss: with as many output tensors as targets (heads of a
    model-parallel module on different devices), the i-th target to the i-th output's device; else all to
    ``first``, the device of the first output tensor (``device_of``)."""
    if count > 1:
        tensors = _tensors(outputs)
        if len(tensors) == count:
            return [tensor.device for tensor in tensors]
    return [first] * count


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    values = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
    return [tensor for item in values for tensor in _tensors(item)]


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
