"""Read the clipping keys of a model config: ``clip_grad_value``, ``clip_grad_norm`` and batchflow's
``gradient_clipping``.

The engine clips the full-batch gradient once, after unscaling and before the optimizer step: by value first
(``clip_grad_value``: a bound on each entry, or a callable ``grad -> grad`` applied to each parameter's gradient),
then by total norm (``clip_grad_norm``). batchflow's ``gradient_clipping`` is the value form: a number clamps each
entry to ``[-v, v]``, a callable is applied to each gradient. batchflow applies it to the gradient of every
backward pass (so of every micro-batch); flowpipe applies it to the full-batch gradient, so that the result does
not depend on how devices and micro-batches split the batch.
"""
from __future__ import annotations

from typing import Any, Callable

from ...parallel.engines import check_clip_value, check_max_norm

__all__ = ['read_clipping']


def read_clipping(spec: Any) -> tuple[float | Callable | None, float | None]:
    """``(clip_grad_value, clip_grad_norm)`` from a ``ModelSpec``, checked; ``gradient_clipping`` is the first."""
    value = check_clip_value(spec.get('clip_grad_value'))
    batchflow = check_clip_value(spec.get('gradient_clipping'), 'gradient_clipping')
    if batchflow is not None:
        if value is not None and value != batchflow:
            raise ValueError(f"Expected clip_grad_value or gradient_clipping (batchflow's name for it), not both. "
                             f"Received: clip_grad_value={value!r}, gradient_clipping={batchflow!r}. "
                             "Keep clip_grad_value.")
        value = batchflow
    return value, check_max_norm(spec.get('clip_grad_norm'))
