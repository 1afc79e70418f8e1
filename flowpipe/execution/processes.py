"""``run(..., prefetch=n, target='processes')``: the first stage of a run in worker processes.

Each worker process gets, once, a dill copy of the stage's runner (dataset, config, variables and models as
they are when the run starts) and sends back only the processed batches. Whatever an action changes in a
worker's copy of the variables or models stays there, so the actions whose whole point is to change shared
state (writes to variables or config, ``use_lock=True``, model actions, ``join``/``merge``) are refused before
the run starts rather than silently lost.
"""
from __future__ import annotations

from typing import Any, Iterator

from ..pipeline import model_actions
from ..pipeline.records import ActionRecord, MaybeRecord
from ..pipeline.registry import get_builtin
from .ordering import access_of

__all__ = ['InProcess', 'check_processes', 'reattach']

# Built-ins whose effect lives in the caller's models or in other pipelines' iterators.
_STATEFUL = ('join', 'merge', *(name for name in model_actions.__all__ if get_builtin(name) is not None))


def check_processes(pipeline: Any, profile: bool) -> None:
    """Raise ``ValueError`` when the pipeline's first stage cannot run in worker processes."""
    if profile:
        raise ValueError("Expected profile=False with target='processes'. Received: profile=True; the timings "
                         "would stay in the worker processes. Profile with target='threads'.")
    batch_class = getattr(pipeline.dataset, 'batch_class', None)
    for record in _first_stage(pipeline.actions):
        access = access_of(record, batch_class)
        if record.name in _STATEFUL:
            why = "its models or batches of other pipelines"
        elif access.lock:
            why = "a use_lock=True action's changes to variables or models"
        elif access.writes:
            why = "its writes to pipeline variables or config"
        else:
            continue
        raise ValueError(f"Expected actions that change no shared state with target='processes'. Received: "
                         f"{record!r}; {why} would stay in a worker process. Use target='threads', or put "
                         f"the action after a rebatch() (later stages run in the caller's process).")


def _first_stage(records: tuple) -> Iterator[ActionRecord]:
    for record in records:
        if isinstance(record, MaybeRecord):
            yield from _first_stage(record.actions)
        elif record.name == 'rebatch':
            return
        else:
            yield record


class InProcess:
    """``runner.process`` for a worker process: the batch travels back without its dataset.

    Args:
        runner: the ``BatchRunner`` of the first stage.
    """

    def __init__(self, runner: Any):
        self.runner = runner

    def __call__(self, seq: int, index: Any) -> Any:
        batch = self.runner.process(seq, index)
        # The worker's dataset is a copy; sending it back with every batch would copy the data each time.
        if getattr(batch, 'dataset', None) is self.runner.dataset:
            batch.dataset = None
        return batch


def reattach(batch: Any, dataset: Any) -> Any:
    """A batch from a worker process, given back the caller's ``dataset``."""
    if hasattr(batch, 'dataset') and batch.dataset is None:
        batch.dataset = dataset
    return batch
