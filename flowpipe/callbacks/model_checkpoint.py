"""``ModelCheckpoint``: keep the model files of the best epochs by a monitored value."""
from __future__ import annotations

import contextlib
import json
import numbers
import os
import uuid
import warnings
from typing import Any

from ..atomic import write_text_atomically
from ..folder_lock import lock_on_main
from .base import Callback, check_mode, model_names, monitored

__all__ = ['ModelCheckpoint']

#: the record of which run wrote which file of a ModelCheckpoint folder
LEDGER = '.modelcheckpoint.json'


class ModelCheckpoint(Callback):
    """Save the model at each epoch end that ranks among the ``save_top_k`` best by ``monitor``.

    Files are ``folder/epoch-<epoch>.model`` (``TorchModel.save``: atomic; ``from_file`` loads them); a file that
    falls out of the best ``k`` is removed. A value ranks only when strictly better than the ``k``-th best, so ties
    keep the earlier epoch. In a distributed job every rank calls the model's ``save`` (collective) and rank 0 alone
    writes and removes files. ``best_path`` and ``best_score`` are those of the best epoch.

    A run removes only the files it wrote: ``folder/.modelcheckpoint.json`` records which run (an id kept in its
    checkpoints) wrote each file, before the file is written. A file of that name that another run or the user
    wrote is kept, and this run writes ``epoch-<epoch>-v<k>.model`` (the first free ``k``) instead, with a warning.
    A run resumed from a checkpoint removes the files it wrote after that checkpoint (it decides about those epochs
    again). The folder is locked for the run's life (rank 0's): a second run into it at the same time raises
    ``FolderInUseError``.

    Args:
        folder: where the files go (made when missing).
        monitor: the logged value to rank epochs by (``'val/accuracy'``).
        mode: ``'min'`` or ``'max'``.
        save_top_k: how many of the best files to keep (>= 1).
        model: the name of the model to save; ``None`` for the pipeline's only model.
    """

    def __init__(self, folder: str | os.PathLike, monitor: str = 'val/loss', mode: str = 'min', save_top_k: int = 1,
                 model: str | None = None):
        if not isinstance(folder, (str, os.PathLike)):
            raise TypeError(f"Expected folder as a str or os.PathLike. Received: folder={folder!r}")
        if isinstance(save_top_k, bool) or not isinstance(save_top_k, numbers.Integral) or save_top_k < 1:
            raise ValueError(f"Expected save_top_k as an int >= 1. Received: save_top_k={save_top_k!r}")
        self.folder, self.monitor, self.mode = os.fspath(folder), monitor, check_mode(mode)
        self.save_top_k, self.model = int(save_top_k), model
        self.kept: list[tuple[float, int, str]] = []        # (score, epoch, path), best first
        self._run = uuid.uuid4().hex                        # this run's id; a resumed run takes its checkpoint's
        self._lock: Any = None
        self._warned_clash = False

    @property
    def best_path(self) -> str | None:
        """The file of the best epoch so far, ``None`` before the first."""
        return self.kept[0][2] if self.kept else None

    @property
    def best_score(self) -> float | None:
        """The monitored value of the best epoch so far, ``None`` before the first."""
        return self.kept[0][0] if self.kept else None

    def on_run_start(self, run: Any, logs: dict | None = None) -> None:
        self._lock = lock_on_main(self.folder, 'modelcheckpoint', 'ModelCheckpoint files',
                                  getattr(run, 'world', None), run.is_main)
        if self._lock is None:
            return
        # this run's files of epochs after the checkpoint it resumes from: it decides about those epochs again
        kept = {os.path.basename(path) for _, _, path in self.kept}
        ledger = self._ledger()
        later = [name for name, owner in ledger.items() if owner == self._run and name not in kept]
        for name in later:
            os.unlink(os.path.join(self.folder, name))
            del ledger[name]
        if later:
            self._write_ledger(ledger)

    def on_epoch_end(self, run: Any, epoch: int, logs: dict | None = None) -> None:
        score = monitored(run, self, logs)
        if score is None:
            return
        if len(self.kept) == self.save_top_k and not self._better(score, self.kept[-1][0]):
            return
        path = self._free_path(run, epoch)
        # every rank calls save: in a distributed job it is collective, and rank 0 alone writes
        self._model(run).save(path)
        self.kept.append((score, epoch, path))
        # best first; among equal scores the earlier epoch first
        self.kept.sort(key=lambda item: (-item[0] if self.mode == 'max' else item[0], item[1]))
        dropped = [path for _, _, path in self.kept[self.save_top_k:]]
        del self.kept[self.save_top_k:]
        if run.is_main and dropped:
            ledger = self._ledger()
            for path in dropped:                            # a file of the best k: this run wrote it
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                ledger.pop(os.path.basename(path), None)
            self._write_ledger(ledger)

    def on_run_end(self, run: Any, logs: dict | None = None) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _free_path(self, run: Any, epoch: int) -> str:
        """``folder/epoch-<epoch>.model`` (``step-<step>.model`` in a run counted in steps), or, when a file this
        run did not write has that name, the first free ``...-v<k>.model`` (said once per run); rank 0's choice in a
        distributed job."""
        unit = getattr(run, 'unit', 'epoch')         # a run counted in steps: its periods end at steps
        path = os.path.join(self.folder, f'epoch-{epoch:04d}.model' if unit == 'epoch' else f'step-{epoch:06d}.model')
        if run.is_main:
            ledger, stem, version = self._ledger(), path[:-len('.model')], 0
            while os.path.exists(path) and ledger.get(os.path.basename(path)) != self._run:
                version += 1
                path = f'{stem}-v{version}.model'
            if version and not self._warned_clash:
                self._warned_clash = True
                warnings.warn(f"ModelCheckpoint keeps {stem}.model, which this run did not write (an earlier "
                              f"run's or your own file), and writes {path} instead. Give each run its own folder "
                              "to keep the plain names.", UserWarning, stacklevel=3)
            ledger[os.path.basename(path)] = self._run       # before the file: a crash leaves it known as ours
            self._write_ledger(ledger)
        if getattr(run, 'world', None) is not None:
            from ..parallel import distributed
            path = distributed.broadcast(path)
        return path

    def _ledger(self) -> dict[str, str]:
        """``{file name: id of the run that wrote it}`` of the folder's files (an unreadable record: none)."""
        try:
            with open(os.path.join(self.folder, LEDGER), encoding='utf-8') as file:
                files = json.load(file).get('files', {})
        except (OSError, ValueError, AttributeError):
            return {}
        return {name: owner for name, owner in files.items() if os.path.exists(os.path.join(self.folder, name))}

    def _write_ledger(self, ledger: dict[str, str]) -> None:
        write_text_atomically(json.dumps({'files': ledger}, indent=1, sort_keys=True),
                              os.path.join(self.folder, LEDGER))

    def _better(self, score: float, than: float) -> bool:
        return score < than if self.mode == 'min' else score > than

    def _model(self, run: Any) -> Any:
        models = run.pipeline.state.models
        if self.model is not None:
            return run.pipeline.m(self.model)
        if not models:      # before the first batch (a run validating at step 0): the model init_model declares
            declared = model_names(run.pipeline) or []
            if len(declared) == 1:
                return run.pipeline.m(declared[0])
        if len(models) != 1:
            raise ValueError(f"Expected ModelCheckpoint(model=name) for a pipeline with {len(models)} models. "
                             f"Received: model=None. Name one of {sorted(models)}.")
        return next(iter(models.values()))

    def state(self) -> dict:
        return {'kept': list(self.kept), 'run': self._run}

    def load_state(self, state: dict) -> None:
        self.kept = [tuple(item) for item in state['kept']]
        self._run = state.get('run', self._run)

    def __repr__(self) -> str:
        return (f"ModelCheckpoint({self.folder!r}, monitor={self.monitor!r}, mode={self.mode!r}, "
                f"save_top_k={self.save_top_k})")
