"""``Validate``: run a validation pipeline every epoch (or every N batches) and log its metrics; a run counted in
steps validates, decides and logs every N batches (``steps=True``)."""
from __future__ import annotations

import numbers
import pickle
from typing import Any, Mapping, Sequence

import numpy as np

from .base import Callback, flat_records
from ..execution.merged_variables import merge_variables
from .metrics import check_metrics, compute_builtin, compute_torchmetric, is_torchmetric, update_torchmetrics

__all__ = ['Validate', 'merge_variables']


class Validate(Callback):
    """Run ``pipeline`` over its dataset once and log ``val/<name>`` for each of ``metrics``.

    Each validation run starts from fresh variables (``reset('variables')``); the models are the training run's
    own when the pipeline imports them (``import_model('net', train)``). With ``every=N`` the values of the last
    validation are logged at each epoch end. A pipeline that trains (``train_model``) is refused, and so is the
    training pipeline itself: validation would train on.

    In a distributed job (``shard=True``) the ranks validate contiguous blocks of whole batches, then every rank
    takes the variables one process would hold (``merge_variables``: list variables are joined in batch order), so
    the metrics are one process's. ``shard=False`` validates the whole set on every rank instead: for variables
    that are not lists (a running sum, the last batch's value).

    Args:
        pipeline: the validation pipeline, bound to its dataset.
        every: ``'epoch'``, or a number of batches.
        batch_size: the validation batch size.
        metrics: built-in names (``['accuracy', 'top5', 'loss']``, see ``flowpipe.callbacks.metrics`` for the
            variables they read), ``torchmetrics.Metric`` objects, or a dict ``{name: fn(pipeline) -> float, a
            built-in name or a Metric}``; functions are called after each validation run.
        shard: in a distributed job, split the validation batches over the ranks (see above).
        steps: count the run in steps: each validation, every ``every`` batches, is where the run's period ends,
            the deciding callbacks decide and the loggers write (``flowpipe.execution.events``), with no epochs.
        at_start: with ``steps``, validate (and decide, log) at step 0 too, before any training.
        estimate: validate on this many batches instead of the whole set (nanoGPT's ``eval_iters``), drawn with
            ``seed`` (``run_kwargs``; 0 by default) and the run's step: a resumed run validates on what the
            uninterrupted one did (random token windows are new at each step, the same on every layout).
        prefix: the logged names are ``<prefix>/<metric>`` (``'val/loss'``); another prefix (``'train_estimate'``)
            for a second ``Validate``, on training data.
        **run_kwargs: more arguments of the validation ``run`` (``prefetch=``, ``drop_last=``...).
    """
    order = 0

    def __init__(self, pipeline: Any, every: int | str = 'epoch', batch_size: int | None = None,
                 metrics: Mapping[str, Any] | Sequence[Any] | None = None, shard: bool = True,
                 steps: bool = False, at_start: bool = False, estimate: int | None = None, prefix: str = 'val',
                 **run_kwargs: Any):
        if every != 'epoch' and (isinstance(every, bool) or not isinstance(every, numbers.Integral) or every < 1):
            raise ValueError(f"Expected every='epoch' or a number of batches >= 1. Received: every={every!r}")
        if (steps or at_start) and (every == 'epoch' or not steps):
            raise ValueError(f"Expected every=N (a number of batches) with steps=True, and at_start only with "
                             f"steps=True. Received: every={every!r}, steps={steps!r}, at_start={at_start!r}")
        if estimate is not None and (isinstance(estimate, bool) or not isinstance(estimate, numbers.Integral)
                                     or estimate < 1):
            raise ValueError(f"Expected estimate as a number of batches >= 1. Received: estimate={estimate!r}")
        if not isinstance(prefix, str) or not prefix or prefix == 'train':
            raise ValueError(f"Expected prefix as a name other than 'train' (the run logs 'train/loss'). "
                             f"Received: prefix={prefix!r}")
        #: ``(every, at_start)`` of a run counted in steps, else ``None`` (read by the run's ``TrainingRun``)
        self.step_periods = (int(every), bool(at_start)) if steps else None
        self.estimate, self.prefix, self._step = estimate, prefix, 0
        _check_pipeline(pipeline)
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
                                       or batch_size < 1):
            raise ValueError(f"Expected batch_size as an int >= 1. Received: batch_size={batch_size!r}.")
        metrics = check_metrics(metrics)
        _check_predicts(pipeline)
        self.pipeline, self.every, self.batch_size, self.metrics = pipeline, every, batch_size, metrics
        self.shard = bool(shard)
        self.run_kwargs = run_kwargs
        self.values: dict[str, float] = {}

    def on_run_start(self, run: Any, logs: dict | None = None) -> None:
        if self.pipeline is run.pipeline:
            raise ValueError(f"Expected a validation pipeline apart from the training one. Received: Validate(<the "
                             f"training pipeline>): each validation would reset its variables and train on. {_FIX}")
        if self.batch_size is None and (self.pipeline.run_args is None or self.pipeline.run_args.batch_size is None):
            raise ValueError("Expected the validation batch size. Received: batch_size=None, and the validation "
                             "pipeline stores none (run(..., lazy=True)). Pass Validate(pipeline, batch_size=N, ...).")

    def validate(self) -> dict[str, float]:
        """One validation run; the metrics as ``{'val/<name>': value}``."""
        from ..execution.run import whole_batches
        from ..parallel import distributed
        from ..pipeline.stages import reading_ranks
        self.pipeline.reset('variables')
        initial = {name: _snapshot(value) for name, value in self.pipeline.variables.items()}
        with whole_batches(split=self.shard):
            batches = self.pipeline.gen_batch(self.batch_size, **self._span())
            sizes = [len(batch) for batch in batches]
        sharded = self.shard and distributed.world_size() > 1
        # the ranks of a pipelined model's pipeline validate the same items: each pipeline's first stage counts them
        readers = reading_ranks(self.pipeline.all_records(), distributed.current()) if sharded else None
        self._update_torchmetrics(sizes, sharded and (readers is None or distributed.rank() in readers))
        if sharded:
            mine = _written(initial, dict(self.pipeline.variables))
            starts = {name: items for name, (items, _) in initial.items() if items is not None}
            gathered = distributed.all_gather((mine, sizes))
            gathered = gathered if readers is None else [gathered[rank] for rank in readers]
            for name, value in merge_variables(starts, [written for written, _ in gathered]).items():
                self.pipeline.set_variable(name, value)
            sizes = [size for _, rank_sizes in gathered for size in rank_sizes]
        self.values = {f'{self.prefix}/{name}': self._value(name, metric, sizes)
                       for name, metric in self.metrics.items()}
        return self.values

    def _span(self) -> dict:
        """The validation run's arguments: one epoch in order, or ``estimate`` batches seeded by the step."""
        if self.estimate is None:
            return {'n_epochs': 1, 'shuffle': False, **self.run_kwargs}
        kwargs = dict(self.run_kwargs)
        base = kwargs.pop('seed', 0)
        seed = int(np.random.SeedSequence([int(base), self._step]).generate_state(1)[0])
        return {'n_iters': self.estimate, 'shuffle': kwargs.pop('shuffle', seed), 'seed': seed, **kwargs}

    def _update_torchmetrics(self, sizes: list[int], sharded: bool) -> None:
        """Feed this rank's batches to the ``torchmetrics.Metric`` objects, whose ``compute`` syncs the ranks: with
        ``shard=False`` every rank validated every batch, so rank 0's updates alone count them once."""
        from ..parallel import distributed
        metrics = [metric for metric in self.metrics.values() if is_torchmetric(metric)]
        for metric in metrics:
            metric.reset()
        if metrics and sizes and (sharded or distributed.rank() == 0):      # a rank may have no batch to validate
            update_torchmetrics(metrics, self.pipeline.variables, sizes)

    def _value(self, name: str, metric: Any, sizes: list[int]) -> float:
        if isinstance(metric, str):
            return compute_builtin(metric, self.pipeline.variables, sizes)
        if is_torchmetric(metric):
            return compute_torchmetric(metric)
        return _number(name, metric(self.pipeline))

    def logged_names(self) -> frozenset[str]:
        return frozenset(f'{self.prefix}/{name}' for name in self.metrics)

    def on_batch_end(self, run: Any, batch: Any, logs: dict | None = None) -> None:
        if self.every != 'epoch' and self.step_periods is None and run.step % self.every == 0:
            self._step = run.step
            self.validate()

    def on_epoch_end(self, run: Any, epoch: int, logs: dict | None = None) -> None:
        self._step = run.step
        fresh = self.every == 'epoch' or self.step_periods is not None
        (run.logs if logs is None else logs).update(self.validate() if fresh else self.values)

    def state(self) -> dict:
        return {'values': dict(self.values)}

    def load_state(self, state: dict) -> None:
        self.values = dict(state['values'])

    def __repr__(self) -> str:
        more = '' if self.step_periods is None else f', steps=True, at_start={self.step_periods[1]!r}'
        more += '' if self.estimate is None else f', estimate={self.estimate!r}'
        more += '' if self.prefix == 'val' else f', prefix={self.prefix!r}'
        return (f"Validate(every={self.every!r}, batch_size={self.batch_size!r}, metrics={sorted(self.metrics)}"
                f"{more})")


_FIX = ("Validate a pipeline that imports the trained model and predicts, e.g. (Pipeline().import_model('net', "
        "train).init_variable('losses', []).predict_model('net', ..., save_to=V('losses', mode='a'))) << "
        "dataset.test.")


def _check_predicts(pipeline: Any) -> None:
    """Refuse a validation pipeline that trains: each validation would train a model on the validation data."""
    records = getattr(pipeline, 'all_records', None)
    training = [record for record in flat_records(records() if records is not None else ())
                if record.name == 'train_model']
    if training:
        raise ValueError(f"Expected a validation pipeline that does not train. Received: one with {training[0]!r} "
                         f"(the training pipeline itself, or one made from its template?): each validation would "
                         f"train on the validation data. {_FIX}")


def _check_pipeline(pipeline: Any) -> None:
    """Refuse at once what would fail only at the first validation: no pipeline."""
    from ..pipeline import Pipeline
    if not isinstance(pipeline, Pipeline):
        raise TypeError(f"Expected the validation pipeline, bound to its dataset (Validate(val_pipeline << "
                        f"dataset.test, ...)). Received: pipeline={pipeline!r}. Pass the pipeline to validate with.")


def _number(name: str, value: Any) -> float:
    """A metric's value as a float: a real number, or a one-item array or tensor; else an error naming it."""
    if isinstance(value, numbers.Real):
        return float(value)
    count = value.numel() if hasattr(value, 'numel') else getattr(value, 'size', None)
    if count == 1 and hasattr(value, 'item'):
        return float(value.item())
    raise TypeError(f"Expected the metric {name!r} to return a number (a float, or an array or tensor of one "
                    f"item). Received: {type(value).__name__} {value!r:.80}. Return one number from the metric, "
                    f"e.g. float(np.mean(...)).")


def _snapshot(value: Any) -> tuple[list | None, Any]:
    """A variable as it was before a validation run: a list's items (a list may be extended in place), or for any
    other value a fingerprint that changes when the value does (its pickle; its identity when it has none)."""
    if isinstance(value, list):
        return list(value), None
    try:
        return None, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None, ('id', id(value))


def _written(initial: Mapping[str, tuple], final: Mapping[str, Any]) -> dict[str, tuple]:
    """What one rank's validation wrote into each variable: ``('items', new)`` for a list extended past its
    initial items, ``('value', value)`` for any other change; unchanged variables are left out."""
    written = {}
    for name, value in final.items():
        items, fingerprint = initial.get(name, ([], None))
        if isinstance(value, list):
            extended = items is not None and len(value) >= len(items) and all(a is b for a, b in zip(value, items))
            if not extended:
                written[name] = ('value', value)
            elif len(value) > len(items):
                written[name] = ('items', value[len(items):])
        elif items is not None or _snapshot(value)[1] != fingerprint:
            written[name] = ('value', value)
    return written
