"""batchflow's loss and learning-rate histories of a model (``loss_list``, ``lr_list``) and their plots
(``plot_loss``, ``plot_lr``).

Each training step adds its full-batch loss and the learning rates it was taken with (one per parameter group).
The losses stay on the device as 0-dim tensors until they are read, so that recording them never makes a step
wait for the device; ``loss_list`` turns them into floats. The histories belong to the model object: they are not
saved with it (``model.save``) and restart at a fresh model.
"""
from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ['History', 'HistoryPlots']


class History:
    """The per-step losses (read lazily) and learning rates of one model."""

    def __init__(self) -> None:
        self._losses: list[float] = []
        self._pending: list[torch.Tensor] = []
        self.lrs: list[list[float]] = []

    def record(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """Add a step's loss (a tensor, not read now) and the learning rates of ``optimizer``'s groups."""
        self._pending.append(loss.detach())
        self.lrs.append([float(group['lr']) for group in optimizer.param_groups])

    @property
    def losses(self) -> list[float]:
        if self._pending:
            self._losses.extend(float(loss) for loss in self._pending)
            self._pending.clear()
        return self._losses


class HistoryPlots:
    """``loss_list``, ``lr_list``, ``plot_loss`` and ``plot_lr`` over a ``history`` attribute (a ``History``)."""

    history: History

    @property
    def loss_list(self) -> list[float]:
        """The full-batch loss of every training step, as floats."""
        return list(self.history.losses)

    @property
    def lr_list(self) -> list[list[float]]:
        """The learning rates every training step was taken with, one list per step (one rate per group)."""
        return [list(rates) for rates in self.history.lrs]

    def plot_loss(self, window: int | None = None, ax: Any = None, logy: bool = False,
                  path: str | os.PathLike | None = None) -> Any:
        """Plot the loss of every training step with matplotlib; returns the axes.

        ``window`` adds a moving mean of that many steps; ``ax`` draws on given axes; ``logy`` a log y axis;
        ``path`` saves the figure to a file (in a script, where matplotlib shows nothing: a warning says so).
        """
        return self._plot({'loss': self.loss_list}, 'plot_loss', window, ax, logy, path)

    def plot_lr(self, ax: Any = None, logy: bool = False, path: str | os.PathLike | None = None) -> Any:
        """Plot the learning rate of every training step (one curve per parameter group); returns the axes."""
        groups = list(zip(*self.history.lrs))
        names = ['lr'] if len(groups) == 1 else [f'lr, group {index}' for index in range(len(groups))]
        return self._plot(dict(zip(names, (list(rates) for rates in groups))), 'plot_lr', None, ax, logy, path)

    def _plot(self, histories: dict, caller: str, window: int | None, ax: Any, logy: bool, path: Any) -> Any:
        if not self.history.lrs:
            raise ValueError(f"Expected a model that has trained before {caller}(). Received: "
                             f"{type(self).__name__} with no training steps. Call train() (or train_model) first.")
        from ...progress.plots import plot_histories
        return plot_histories(histories, window=window, ax=ax, logy=logy, xlabel='iteration', path=path,
                              caller=f'{type(self).__name__}.{caller}')
