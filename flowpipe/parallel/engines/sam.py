"""Sharpness-aware minimization (SAM): the second forward/backward pass of a training step, at perturbed weights.

Foret et al., "Sharpness-Aware Minimization for Efficiently Improving Generalization" (arXiv:2010.01412). A SAM
step of :meth:`Engine.train_step <flowpipe.parallel.engines.base.Engine.train_step>`:

1. the usual pass: every piece's forward and backward, then ``reduce_gradients``: the full-batch gradient ``g``
   at the weights ``w`` (the step's loss and outputs come from this pass);
2. under a gradient scaler, ``g`` is unscaled (``Precision.unscale_grads``); a non-finite value there ends SAM for
   the batch: the scaler's step finds it, skips the optimizer step and lowers the scale, as for any batch that
   overflows;
3. the perturbation ``e = rho * g / ||g||``, where ``||g||`` is the 2-norm of the whole gradient, or, with
   ``individual_norm``, ``e_p = rho * g_p / ||g_p||`` for each parameter ``p`` on its own (a parameter whose
   gradient is zero is not moved); a sharded engine's gradients are ``DTensor`` shards, whose norms are the whole
   gradients', and its weights move shard by shard;
4. the weights become ``w + e`` (``share_parameters`` gives them to the other replicas), the gradients are
   cleared and the same pieces, with the same random streams (dropout masks), run forward and backward again and
   are reduced: the full-batch gradient at ``w + e``;
5. the weights are restored exactly from a copy (not by subtracting ``e``), and so are the buffers of every
   replica (BatchNorm statistics keep the values of the first pass); the optimizer then steps with the second
   gradient, which clipping (if any) clips.

Only the optimizer's parameters with a gradient are perturbed. The copy of the weights costs one parameter-sized
buffer per step.
"""
from __future__ import annotations

import contextlib
import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch

from .tensors import local_shard

if TYPE_CHECKING:
    from .base import Engine

__all__ = ['Sam', 'make_sam', 'perturbation', 'sharpness_pass']


@dataclass(frozen=True)
class Sam:
    """SAM's options: the radius ``rho`` of the neighbourhood, and whether each parameter's gradient is normalized by
    its own norm (``individual_norm``) or all by the norm of the whole gradient."""

    rho: float
    individual_norm: bool = True


def make_sam(rho: Any, individual_norm: Any = True) -> Sam | None:
    """``Sam`` for ``sam_rho`` and ``sam_individual_norm``; ``None`` when ``rho`` is 0, ``None`` or ``False``
    (SAM off, as in batchflow), else a clear error for a bad value."""
    if rho is None or rho is False or (isinstance(rho, numbers.Real) and not isinstance(rho, bool) and rho == 0):
        return None
    if isinstance(rho, bool) or not isinstance(rho, numbers.Real):
        raise TypeError(f'Expected sam_rho as a non-negative number (the radius of the perturbation) or None. '
                        f'Received: {rho!r} of type {type(rho).__name__}.')
    if not (math.isfinite(rho) and rho > 0):
        raise ValueError(f'Expected sam_rho as a finite non-negative number. Received: sam_rho={rho!r}. Use 0 or '
                         f'None to turn SAM off, or e.g. 0.05.')
    if not isinstance(individual_norm, bool):
        raise TypeError(f'Expected sam_individual_norm as True (each gradient by its own norm) or False (all by the '
                        f'norm of the whole gradient). Received: {individual_norm!r}.')
    return Sam(float(rho), individual_norm)


@torch.no_grad()
def perturbation(grads: Sequence[torch.Tensor], sam: Sam, norms: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """SAM's ``e`` for each gradient in ``grads``, given their 2-norms ``norms`` (0-dim tensors): each by its own
    norm (``sam.individual_norm``) or all by the norm of the whole gradient; a zero norm gives a zero ``e``."""
    if sam.individual_norm:
        scales = [_scale(sam.rho, norm) for norm in norms]
    else:
        device = norms[0].device
        total = torch.linalg.vector_norm(torch.stack([norm.to(device) for norm in norms]))
        scales = [_scale(sam.rho, total)] * len(norms)
    return [grad * scale.to(grad.device, grad.dtype) for grad, scale in zip(grads, scales)]


def _scale(rho: float, norm: torch.Tensor) -> torch.Tensor:
    # rho / norm, and 0 where the norm is 0 (a parameter the batch did not move): no host synchronization
    return torch.where(norm > 0, rho / norm, torch.zeros_like(norm))


def sharpness_pass(engine: 'Engine', sam: Sam, optimizer: torch.optim.Optimizer, run_pass: Callable[[], Any],
                   check_nonfinite: bool) -> bool:
    """Steps 2 to 5 of the module docstring, after the first pass left the full-batch gradient on the primary;
    ``run_pass()`` runs every piece and reduces (returns the ``StepResult``). Whether the optimizer may step: ``False``
    when ``check_nonfinite`` finds a nan or inf in the second pass's loss or gradient."""
    params = [param for group in optimizer.param_groups for param in group['params'] if param.grad is not None]
    if not params:
        return True
    grads = [param.grad for param in params]
    if any(grad.is_sparse for grad in grads):
        raise ValueError('Expected dense gradients for sharpness-aware minimization. Received: a sparse gradient '
                         '(an nn.Embedding with sparse=True, say). Use dense gradients, or set sam_rho=0.')
    if engine.precision.unscale_grads(grads):
        return True         # the scaler's step skips the batch and lowers the scale
    shift = perturbation(grads, sam, torch._foreach_norm(grads))
    with _perturbed(engine, params, shift):
        engine.zero_grad(optimizer)
        result = run_pass()
        return not (check_nonfinite and engine.nonfinite(result.loss, optimizer))


@contextlib.contextmanager
def _perturbed(engine: 'Engine', params: list[torch.Tensor], shift: list[torch.Tensor]) -> Iterator[None]:
    """The primary's ``params`` moved by ``shift`` (and shared with the replicas) inside; on the way out the weights
    and every replica's buffers exactly as they were, also after an error (then shared again)."""
    with torch.no_grad():
        # a sharded parameter as its local shard: the elementwise steps need no communication, and DTensor has no
        # sharding rule for every foreach operation
        params, shift = [local_shard(t) for t in params], [local_shard(t) for t in shift]
        weights = [param.detach().clone() for param in params]
        buffers = [buffer for replica in engine.replicas for buffer in replica.buffers()]
        saved = [buffer.detach().clone() for buffer in buffers]
        torch._foreach_add_(params, shift)
    engine.share_parameters()
    failed = True
    try:
        yield
        failed = False
    finally:
        with torch.no_grad():
            torch._foreach_copy_(params, weights)
            if buffers:
                torch._foreach_copy_(buffers, saved)
        if failed:
            engine.share_parameters()
