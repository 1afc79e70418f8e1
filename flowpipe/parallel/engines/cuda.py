"""CUDA placement of a replica's work: its current device and its own stream, ordered after what came before.

Every helper is a no-op for a CPU device, so engines call them whatever the device list (CPU, GPUs, or both).

Ordering rule: a replica's stream waits on an event recorded on its device's current stream by the caller's
thread *before any replica starts* (the previous step's broadcast and the caller's own work are queued there),
never on a default stream while other replicas are already queueing work on it: waiting there would make the
replica wait for replica 0's forward and backward (a false dependency).
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from ...torchutils import NO_CONTEXT

__all__ = ['device_context', 'ready_event', 'run_on_stream']


def device_context(device: torch.device) -> contextlib.AbstractContextManager:
    """``torch.cuda.device(device)`` for a GPU (user code allocating on ``'cuda'`` lands there); else nothing."""
    return torch.cuda.device(device) if device.type == 'cuda' else NO_CONTEXT


def ready_event(device: torch.device) -> torch.cuda.Event | None:
    """An event recorded now on ``device``'s current stream (``None`` on a CPU): work queued so far is before it."""
    if device.type != 'cuda':
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


def run_on_stream(stream: torch.cuda.Stream | None, ready: torch.cuda.Event | None,
                  work: Callable[[], Any]) -> Any:
    """Run ``work`` with ``stream`` current (and its device), after ``ready``; return once the stream is done.

    The host waits for the stream at the end, so tensors made by ``work`` can be used on any stream afterwards.
    With ``stream=None`` (a CPU replica) ``work`` simply runs.
    """
    if stream is None:
        return work()
    with torch.cuda.device(stream.device), torch.cuda.stream(stream):
        if ready is not None:
            stream.wait_event(ready)
        result = work()
    stream.synchronize()
    return result
