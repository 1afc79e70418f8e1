"""``plot_matrix``: a confusion matrix drawn by ``flowpipe.plot``'s ``'matrix'`` mode (matplotlib, optional:
``pip install 'flowpipe[figures]'``)."""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

__all__ = ['plot_matrix']


def plot_matrix(matrix: np.ndarray, classes: Sequence[Any] | None = None, normalize: bool = False,
                path: str | os.PathLike | None = None, ax: Any = None, xtick_rotation: float = 90,
                caller: str = 'ClassificationMetrics', **kwargs: Any) -> Any:
    """Draw ``matrix[predicted, actual]`` with its values written in the cells and a colour bar; returns the axes.

    Args:
        matrix: a square matrix of counts (or shares, ``normalize=True``).
        classes: the class names along both axes (by default their numbers).
        normalize: whether the columns hold shares of each actual class (the title says so; two decimals).
        path: save the figure to this file; without it and without ``ax``, a backend that shows nothing
            (a script's Agg) gets a ``UserWarning`` that names ``path=``.
        ax: the axes to draw on; a new figure by default.
        xtick_rotation: the angle of the actual class names.
        caller: the name the warning gives the call.
        kwargs: ``figsize`` (a new figure's size), and ``plot``'s parameters for ``mode='matrix'`` (``cmap``:
            ``'Blues'`` by default, ``colorbar``, ``label_format``, ``title``...).
    """
    from ...plotter import Plot
    from ...progress.plots import finish_figure, pyplot
    plt = pyplot('plot_confusion_matrix()')
    classes = list(range(len(matrix))) if classes is None else list(classes)
    if len(classes) != len(matrix):
        raise ValueError(f"Expected {len(matrix)} class names (one per row of the confusion matrix). Received: "
                         f"classes={classes!r}")
    new_figure = ax is None
    if new_figure:
        _, ax = plt.subplots(figsize=kwargs.pop('figsize', (6, 6)))
    config = {'title': 'Normalized confusion matrix' if normalize else 'Confusion matrix', 'cmap': 'Blues',
              'xlabel': 'Actual class', 'ylabel': 'Predicted class', 'label_format': '.2f' if normalize else 'g',
              'xtick_labels': classes, 'xtick_rotation': xtick_rotation, 'ytick_labels': classes, **kwargs}
    Plot(matrix, mode='matrix', axes=ax, **config)
    if path is not None or new_figure:
        finish_figure(ax.figure, path, f'{caller}.plot_confusion_matrix', stacklevel=4)
    return ax
