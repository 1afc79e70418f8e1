"""``ModelCheckpoint``: keep the model files of the best epochs by a monitored value."""
from __future__ import annotations

import numbers
import os
import re
from typing import Any

from .base import Callback, check_mode, monitored

__all__ = ['ModelCheckpoint']

_FILE = re.compile(r'^epoch-\d+\.model$')


class ModelCheckpoint(Callback):
    """Save the model at each epoch end that ranks among the ``save_top_k`` best by ``monitor``.

    Files are ``folder/epoch-<epoch>.model`` (``TorchModel.save``: atomic; ``from_file`` loads them); a file that
    falls out of the best ``k`` is removed. A value ranks only when strictly better than the ``k``-th best, so ties
    keep the earlier epoch. In a distributed job every rank calls the model's ``save`` (collective) and rank 0 alone
    writes and removes files. ``best_path`` and ``best_score`` are those of the best epoch.

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

    @property
    def best_path(self) -> str | None:
        """The file of the best epoch so far, ``None`` before the first."""
        return self.kept[0][2] if self.kept else None

    @property
    def best_score(self) -> float | None:
        """The monitored value of the best epoch so far, ``None`` before the first."""
        return self.kept[0][0] if self.kept else None

    def on_run_start(self, run: Any) -> None:
        if run.is_main and os.path.isdir(self.folder):
            # files of epochs after the checkpoint a run resumes from: this run decides about those epochs again
            kept = {os.path.basename(path) for _, _, path in self.kept}
            for name in os.listdir(self.folder):
                if _FILE.match(name) and name not in kept:
                    os.unlink(os.path.join(self.folder, name))

    def on_epoch_end(self, run: Any, epoch: int) -> None:
        score = monitored(run, self)
        if score is None:
            return
        if len(self.kept) == self.save_top_k and not self._better(score, self.kept[-1][0]):
            return
        path = os.path.join(self.folder, f'epoch-{epoch:04d}.model')
        # every rank calls save: in a distributed job it is collective, and rank 0 alone writes
        self._model(run).save(path)
        self.kept.append((score, epoch, path))
        # best first; among equal scores the earlier epoch first
        self.kept.sort(key=lambda item: (-item[0] if self.mode == 'max' else item[0], item[1]))
        for _, _, dropped in self.kept[self.save_top_k:]:
            if run.is_main and os.path.exists(dropped):
                os.unlink(dropped)
        del self.kept[self.save_top_k:]

    def _better(self, score: float, than: float) -> bool:
        return score < than if self.mode == 'min' else score > than

    def _model(self, run: Any) -> Any:
        models = run.pipeline.state.models
        if self.model is not None:
            return run.pipeline.m(self.model)
        if len(models) != 1:
            raise ValueError(f"Expected ModelCheckpoint(model=name) for a pipeline with {len(models)} models. "
                             f"Received: model=None. Name one of {sorted(models)}.")
        return next(iter(models.values()))

    def state(self) -> dict:
        return {'kept': list(self.kept)}

    def load_state(self, state: dict) -> None:
        self.kept = [tuple(item) for item in state['kept']]

    def __repr__(self) -> str:
        return (f"ModelCheckpoint({self.folder!r}, monitor={self.monitor!r}, mode={self.mode!r}, "
                f"save_top_k={self.save_top_k})")
