"""``Validate``: run a validation pipeline every epoch (or every N batches) and log its metrics."""
from __future__ import annotations

import numbers
from typing import Any, Callable, Mapping

from .base import Callback

__all__ = ['Validate']


class Validate(Callback):
    """Run ``pipeline`` over its dataset once and log ``val/<name>`` = ``metrics[name](pipeline)``.

    Each validation run starts from fresh variables (``reset('variables')``); the models are the training run's
    own when the pipeline imports them (``import_model('net', train)``). With ``every=N`` the values of the last
    validation are logged at each epoch end. In a distributed job every rank validates on the whole set
    (unsharded), so the metrics are one process's whatever they compute.

    Args:
        pipeline: the validation pipeline, bound to its dataset.
        every: ``'epoch'``, or a number of batches.
        batch_size: the validation batch size.
        metrics: ``{name: fn(pipeline) -> float}``, called after each validation run.
        **run_kwargs: more arguments of the validation ``run`` (``prefetch=``, ``drop_last=``...).
    """
    order = 0

    def __init__(self, pipeline: Any, every: int | str = 'epoch', batch_size: int | None = None,
                 metrics: Mapping[str, Callable[[Any], float]] | None = None, **run_kwargs: Any):
        if every != 'epoch' and (isinstance(every, bool) or not isinstance(every, numbers.Integral) or every < 1):
            raise ValueError(f"Expected every='epoch' or a number of batches >= 1. Received: every={every!r}")
        metrics = dict(metrics or {})
        wrong = [name for name, fn in metrics.items() if not isinstance(name, str) or not callable(fn)]
        if not metrics or wrong:
            raise TypeError(f"Expected metrics as {{name: fn(pipeline) -> float}}, at least one. Received: "
                            f"metrics={metrics!r}")
        self.pipeline, self.every, self.batch_size, self.metrics = pipeline, every, batch_size, metrics
        self.run_kwargs = run_kwargs
        self.values: dict[str, float] = {}

    def validate(self) -> dict[str, float]:
        """One validation run; the metrics as ``{'val/<name>': value}``."""
        from ..execution.run import whole_on_every_rank
        self.pipeline.reset('variables')
        with whole_on_every_rank():
            self.pipeline.run(self.batch_size, n_epochs=1, shuffle=False, **self.run_kwargs)
        self.values = {f'val/{name}': float(fn(self.pipeline)) for name, fn in self.metrics.items()}
        return self.values

    def logged_names(self) -> frozenset[str]:
        return frozenset(f'val/{name}' for name in self.metrics)

    def on_batch_end(self, run: Any, batch: Any) -> None:
        if self.every != 'epoch' and run.step % self.every == 0:
            self.validate()

    def on_epoch_end(self, run: Any, epoch: int) -> None:
        run.logs.update(self.validate() if self.every == 'epoch' else self.values)

    def state(self) -> dict:
        return {'values': dict(self.values)}

    def load_state(self, state: dict) -> None:
        self.values = dict(state['values'])

    def __repr__(self) -> str:
        return f"Validate(every={self.every!r}, batch_size={self.batch_size!r}, metrics={sorted(self.metrics)})"
