"""One run's checkpoints: what it resumes from, when it writes, and the state a checkpoint holds.

A checkpoint is taken in the caller's thread between two batches, when no stateful action of a later batch has
started (a run with ``checkpoint=`` runs its stateful actions in the caller's thread, as ``gen_batch`` does, while
the workers prefetch the rest). It holds the run's nodes' state (the position in the index), the root seed, the
variables, every built model (weights, optimizer, scheduler, scaler, step count) and the global random states
(Python's, numpy's, torch's), so the resumed run draws, trains and writes exactly what the uninterrupted one would.

The models' weights and optimizer state go into the file, gathered on rank 0 (every rank takes part when an engine
shards them), or, with ``Checkpoint(sharded=True)``, one shard per rank into a folder beside the file
(``torch.distributed.checkpoint``, written before the file, so a file always has its shards).
"""
from __future__ import annotations

import os
import pickle
import random
import sys
import time
from typing import Any, Iterator

import dill
import numpy as np

from ..folder_lock import lock_on_main
from ..pipeline.model_actions import PendingModel, loaded_files, mark_loaded
from ..pipeline.resumed_layout import overrides as resume_overrides
from ..pipeline.stages import pipeline_stages
from . import checkpoint as files
from . import relayout
from .canonical import describe
from .checkpoint import as_checkpoint
from .nodes import CheckpointError, chain_busy
from .resume_changes import allowed_changes, apply_optimizer_changes, model_overrides, warn_changes
from .signals import Agreement, agree

__all__ = ['RunCheckpoints', 'check_resumable']


def _names(records: tuple) -> set[str]:
    names = set()
    for record in records:
        inner = getattr(record, 'actions', None)         # the records of a ``p @ prob`` block
        names |= _names(inner) if inner is not None else {record.name}
    return names


def check_resumable(pipeline: Any) -> None:
    """Refuse a pipeline whose state a checkpoint cannot hold: ``join``/``merge`` pull other pipelines' batches."""
    pulls = sorted(_names(pipeline.all_records()) & {'join', 'merge'})
    if pulls:
        raise CheckpointError(f"Expected a pipeline without join or merge to checkpoint. Received: {', '.join(pulls)}, "
                              "which pull batches from other pipelines whose position a checkpoint does not keep.")


class RunCheckpoints:
    """The checkpoints of one run.

    In a distributed job (``world``) every rank takes part in each write: rank 0 gathers the ranks' variables and
    random states and writes one file with the models (the same on every rank), the position (the same global
    batch everywhere) and the layout; every rank resumes from the file rank 0 picks, with its own variables and
    random states, or on another layout as ``relayout`` says.

    Args:
        pipeline: the running pipeline.
        args: the run's ``RunArgs`` (``checkpoint``, ``resume``).
        world: the ``World`` of a distributed job, or ``None``.
    """

    def __init__(self, pipeline: Any, args: Any, world: Any = None):
        self.spec = as_checkpoint(args.checkpoint)
        self.pipeline, self.world = pipeline, world
        self.fingerprint = describe(pipeline, args, 1 if world is None else world.size)
        self.path: str | None = None          # the checkpoint file resumed from
        self.trusted = False                  # whether it was read trusted (its shards are read alike)
        #: the ``(key, old, new)`` changes from the checkpoint's run that this run applies (``resume_changes``)
        self.changes: list = []
        # the folder is this run's until it ends: rank 0 writes and removes its files
        self.lock = None if self.spec is None else lock_on_main(self.spec.path, 'checkpoints', 'run checkpoints', world)
        try:
            self.saved = self._read(args.resume)
            found = files.latest_in(self.spec.path) if self.saved is None and self.spec is not None else None
            if found is not None:
                raise CheckpointError(f"Expected an empty checkpoint folder for a run that does not resume. Received: "
                                      f"{self.spec.path!r}, which holds {found!r}. Pass resume=True to go on from it, "
                                      "or delete the folder's checkpoints to start afresh.")
        except BaseException:
            self.close()
            raise
        self.done = self.saved['batches'] if self.saved is not None else 0
        self.written = self.done if self.saved is not None else None
        #: the run's ``TrainingRun`` when it has callbacks: their state goes into every checkpoint
        self.events: Any = None
        #: the run's ``GracefulStop`` when it stops on signals: its first signal is this rank's stop flag
        self.signals: Any = None
        self._clock = time.monotonic()
        spec = self.spec
        #: under ranks, what the engine's exchange of item counts carries for the checks after a batch
        self.agreement = Agreement(self._flags) if world is not None and spec is not None and (
            spec.seconds is not None or spec.on_interrupt) else None

    def close(self) -> None:
        """The run has ended: let another run use the folder."""
        if self.lock is not None:
            self.lock.release()

    def closing(self, batches: Iterator[Any]) -> Iterator[Any]:
        """``batches``; once they end (or are closed), the folder is free for another run."""
        try:
            yield from batches
        finally:
            self.close()

    def _read(self, resume: Any) -> dict | None:
        if resume is False or resume is None:
            return None
        trusted = self.spec is not None and self.spec.trusted
        if resume is True:
            if self.spec is None:
                raise ValueError("Expected checkpoint=path with resume=True (the folder to resume from). Received: "
                                 "no checkpoint. Pass checkpoint=..., or resume='path/to/folder-or-file'.")
            source = self.spec.path
        elif isinstance(resume, files.Checkpoint):      # where to resume from and how to read it, without writing
            source, trusted = resume.path, resume.trusted
        else:
            source = os.fspath(resume)
            if not os.path.exists(source):
                raise FileNotFoundError(f"Expected a checkpoint file or folder to resume from. Received: "
                                        f"resume={source!r}, which does not exist.")
        path = files.latest(source)
        if self.world is not None:
            path = _distributed().broadcast(path)         # every rank resumes from the file rank 0 found
        if path is None:
            return None
        self.path, self.trusted = path, trusted
        saved = files.read(path, trusted=trusted)
        if saved.get('format_version', 0) < 2:
            raise CheckpointError(f"Expected a checkpoint of format version {files.FORMAT_VERSION}, whose fingerprint "
                                  f"holds the whole config. Received: {path!r}, version {saved.get('format_version')!r} "
                                  "(written by an earlier flowpipe). Resume it with that flowpipe, or start afresh.")
        self.changes = allowed_changes(saved['fingerprint'], self.fingerprint, path)
        return saved

    def root(self, default: tuple[int, bool]) -> tuple[int, bool]:
        """The run's ``(root seed, given)``: the checkpoint's when resuming, else ``default``."""
        return (self.saved['root'], self.saved['given']) if self.saved is not None else default

    def check_limit(self, total: int | None) -> None:
        """Refuse ``n_epochs``/``n_iters`` changed on resume to fewer batches than the checkpoint's run took."""
        if self.saved is not None and total is not None and total < self.done:
            raise ValueError(f"Expected n_epochs or n_iters giving at least the {self.done} batches the checkpoint "
                             f"{self.path!r} was written after. Received: a run of {total} batches. Pass a larger "
                             "limit, or start afresh without resume=.")

    def restore(self, stream: Any) -> None:
        """Put the checkpoint's state into the pipeline and the run's nodes (before the first batch)."""
        if self.saved is None:
            return
        if self.world is None or self.world.rank == 0:
            warn_changes(self.changes, self.path)
        state = self.pipeline.state
        rank, size = (0, 1) if self.world is None else (self.world.rank, self.world.size)
        with state.variables.lock:
            own = relayout.rank_state(self.saved, rank, size, dict(state.variables), self._stages())
            state.variables.update(own['variables'])
        _load_models(state.models, self.saved['models'], self.saved.get('loaded', {}),
                     model_overrides(self.changes, self.pipeline))
        if self.saved.get('shards') is not None:
            _load_shards(state.models, files.shards_of(self.path), self.saved['shards'], self.trusted)
        apply_optimizer_changes(self.changes, self.pipeline, state.models)
        layout = relayout.saved_layout(self.saved)
        for name, model in _built_models(state.models):
            relayout.check_random_layers(name, model, layout, size)
        stream.load_state(self.saved['nodes'])
        if self.events is not None:
            if self.saved.get('events') is None:
                raise CheckpointError("Expected a checkpoint of a run with the same callbacks. Received: one written "
                                      "without callbacks=. Resume without callbacks=, or start afresh.")
            self.events.load_state(self.saved['events'])
        state.batches = self.saved['pipeline_batches']
        _set_random_states(own['random'])

    def _stages(self) -> int | None:
        """The run's pipeline stages under ranks (its data parts are the pipelines), ``None`` for none."""
        return None if self.world is None else pipeline_stages(self.pipeline.all_records())

    def check(self, stream: Any) -> None:
        """Fail before the first batch when a node cannot be checkpointed."""
        if self.spec is not None:
            stream.state()

    def after_batch(self, stream: Any, root: tuple[int, bool], stop: int = 0) -> int:
        """A batch is complete: write when one is due or the run stops; the number of the signal the run stops on
        (``stop``: the one this process received, 0 for none; under ranks the highest any rank had received at the
        batch's exchange).

        Under ranks the exchange is the engine's exchange of item counts at the batch's training step, which the
        ``agreement`` rides in; a batch without one has an ``all_reduce`` of its own (``agree``) here."""
        self.done += 1
        spec = self.spec
        if spec is None:
            return stop
        due = spec.every is not None and self.done % spec.every == 0
        if self.agreement is None:
            timed = self._timed()              # one process, or ranks that agree on nothing: every= only
        else:
            timed, stop = self.agreement.take() or agree(*self._flags())
        if due or timed or stop:
            self.write(stream, root)
        return stop

    def _timed(self) -> bool:
        """Whether a ``seconds`` checkpoint is due on this rank's clock."""
        return self.spec.seconds is not None and time.monotonic() - self._clock >= self.spec.seconds

    def _flags(self) -> tuple[bool, int]:
        """This rank's ``(due, stop)`` for the ranks' agreement: rank 0's clock decides, any rank's signal stops."""
        return self.world.rank == 0 and self._timed(), 0 if self.signals is None else self.signals.first

    def finish(self, stream: Any, root: tuple[int, bool], interrupted: bool) -> None:
        """At the end of the run (``interrupted``: Ctrl-C or an early exit): write the last completed batch's
        checkpoint if it has none and the state is between batches."""
        if self.spec is None or self.written == self.done or chain_busy(stream):
            return
        if self.events is not None and self.events.busy:
            return                                         # inside a batch's callbacks: half of them have run
        if interrupted and (not self.spec.on_interrupt or self.world is not None):
            return                                         # the other ranks are not here to take part
        self.write(stream, root)

    def write(self, stream: Any, root: tuple[int, bool]) -> None:
        """Write the state after the ``done`` completed batches."""
        state = self.pipeline.state
        with state.variables.lock:
            variables = dict(state.variables)
        own = {'variables': variables, 'random': _random_states()}
        ranks = None if self.world is None else _distributed().gather(own, dst=0)
        main, sharded = self.world is None or self.world.rank == 0, self.spec.sharded
        shards = _save_shards(state.models, files.shards_path(self.spec.path, self.done)) if sharded else None
        models = _model_states(state.models, tensors=not sharded) if main or (
            not sharded and _collective(state.models)) else None     # a sharded engine gathers on every rank
        if not main:
            self.written, self._clock = self.done, time.monotonic()
            return
        layout = relayout.layout_of(dict(_built_models(state.models)), 1 if self.world is None else self.world.size,
                                    self._stages())
        payload = {'fingerprint': self.fingerprint, 'root': root[0], 'given': root[1], 'batches': self.done,
                   'pipeline_batches': state.batches, 'nodes': stream.state(), **own, 'ranks': ranks,
                   'layout': layout,
                   'models': models, 'shards': shards, 'loaded': loaded_files(state.models),
                   'events': None if self.events is None else self.events.state()}
        try:
            files.write(self.spec.path, self.done, payload, self.spec.keep)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            raise CheckpointError(f"Expected variables that dill can pickle to write a checkpoint. Received: "
                                  f"{_unpicklable(variables)} ({type(error).__name__}: {error}). Keep such objects "
                                  "out of the pipeline's variables, or run without checkpoint=.") from error
        self.written, self._clock = self.done, time.monotonic()


def _distributed() -> Any:
    from ..parallel import distributed
    return distributed


def _unpicklable(variables: dict) -> str:
    """The first variable dill cannot pickle, named for an error message."""
    for name, value in variables.items():
        try:
            dill.dumps(value)
        except Exception:  # noqa: BLE001 - any failure names the variable
            return f"variable {name!r} of type {type(value).__name__}"
    return "a value that does not pickle"


def _built_models(models: Any) -> list[tuple[str, Any]]:
    """``(name, model)`` of the built models, by name (the same order on every rank)."""
    with models.lock:
        items = sorted(models.items())
    return [(name, model) for name, model in items
            if not isinstance(model, PendingModel) and getattr(model, 'engine', None) is not None]


def _collective(models: Any) -> bool:
    """Whether a built model's state is gathered by every rank (``Engine.collective_state``)."""
    return any(getattr(model.engine, 'collective_state', False) for _, model in _built_models(models))


def _save_shards(models: Any, folder: str) -> dict[str, bool]:
    """Write the built models' weights and optimizer state, one shard per rank, into ``folder`` (every rank);
    ``{name: whether its optimizer state was written}``."""
    from ..parallel import sharded_state
    states = {name: model.sharded_state() for name, model in _built_models(models)}
    sharded_state.save_shards(folder, states)
    return {name: 'optimizer' in state for name, state in states.items()}


def _load_shards(models: Any, folder: str, saved: dict[str, bool], trusted: bool = False) -> None:
    """Read the shards of ``saved``'s models from ``folder`` into the store's models (every rank)."""
    from ..parallel import sharded_state
    built = dict(_built_models(models))
    missing = sorted(set(saved) - set(built))
    if missing:
        raise CheckpointError(f"Expected the models {sorted(saved)} built to resume from {folder!r}. Received: "
                              f"{missing} not built. Resume with the pipeline that wrote the checkpoint.")
    states = {name: built[name].sharded_state(with_optimizer=optimizer) for name, optimizer in saved.items()}
    sharded_state.load_shards(folder, states, trusted)
    for name, state in states.items():
        built[name].load_sharded_state(state)


def _model_states(models: Any, tensors: bool = True) -> dict[str, Any]:
    """``{name: model file payload}`` of built models (``tensors=False``: without the weights and optimizer
    state, which shards hold); ``None`` for one not built yet."""
    states = {}
    with models.lock:
        items = list(models.items())
    for name, model in items:
        if isinstance(model, PendingModel):
            states[name] = None
            continue
        from ..models.torch import TorchModel, io
        if not isinstance(model, TorchModel):
            raise CheckpointError(f"Expected TorchModel models to checkpoint. Received: model {name!r} of type "
                                  f"{type(model).__name__}. Checkpoints keep TorchModel models only.")
        states[name] = io.for_file(io.payload(model, tensors)) if model.engine is not None else None
    return states


def _load_models(models: Any, saved: dict[str, Any], loaded: dict[str, str], overrides: dict[str, dict]) -> None:
    """Put the saved models into the store, those not built yet built with ``overrides[name]`` (the changed
    model keys: a new placement among them); those ``load_model`` had loaded count as loaded from their files.
    Under ``resumed_with`` (``pipeline.resumed_layout``) every saved model is built anew with its config items too."""
    given = resume_overrides()
    for name, payload in saved.items():
        if payload is None:
            continue
        import torch

        from ..models.torch import io
        current = models.get(name)
        built = current is not None and not isinstance(current, PendingModel) and current.engine is not None
        if built and given is None:
            io.load_into(current, payload)
            continue
        with torch.random.fork_rng(devices=[]):        # building must not move the generator restored later
            model = io.from_payload(payload, **{**overrides.get(name, {}), **(given or {})})
        with models.lock:
            models[name] = model
    mark_loaded(models, {name: source for name, source in loaded.items() if saved.get(name) is not None})


def _random_states() -> dict[str, Any]:
    states = {'python': random.getstate(), 'numpy': np.random.get_state()}
    torch = sys.modules.get('torch')
    if torch is not None:
        states['torch'] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states['cuda'] = torch.cuda.get_rng_state_all()
    return states


def _set_random_states(states: dict[str, Any]) -> None:
    random.setstate(states['python'])
    np.random.set_state(states['numpy'])
    if 'torch' in states:
        import torch
        torch.set_rng_state(states['torch'])
        if 'cuda' in states and torch.cuda.is_available() and torch.cuda.device_count() == len(states['cuda']):
            torch.cuda.set_rng_state_all(states['cuda'])
