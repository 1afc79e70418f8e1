"""``plot_matrix``: a confusion matrix drawn with matplotlib (optional: ``pip install 'flowpipe[figures]'``)."""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

__all__ = ['plot_matrix']


def plot_matrix(matrix: np.ndarray, classes: Sequence[Any] | None = None, normalize: bool = False,
                path: str | os.PathLike | None = None, ax: Any = None, xtick_rotation: float = 90,
                caller: str = 'ClassificationMetrics', **kwargs: Any) -> Any:
    """Draw ``matrix[predicted, actual]`` with its values written in the cells; returns the axes.

    Args:
        matrix: a square matrix of counts (or shares, ``normalize=True``).
        classes: the class names along both axes (by default their numbers).
        normalize: whether the columns hold shares of each actual class (the title says so).
        path: save the figure to this file; without it and without ``ax``, a backend that shows nothing
            (a script's Agg) gets a ``UserWarning`` that names ``path=``.
        ax: the axes to draw on; a new figure by default.
        xtick_rotation: the angle of the actual class names.
        caller: the name the warning gives the call.
        kwargs: ``figsize`` (a new figure's size), ``cmap`` (the colour map, ``'Blues'`` by default).
    """
    from ...progress.plots import finish_figure, pyplot
    plt = pyplot('plot_confusion_matrix()')
    classes = list(range(len(matrix))) if classes is None else list(classes)
    if len(classes) != len(matrix):
        raise ValueError(f"Expected {len(matrix)} class names (one per row of the confusion matrix). Received: "
                         f"classes={classes!r}")
    unknown = set(kwargs) - {'figsize', 'cmap'}
    if unknown:
        raise TypeError(f"Expected plot_confusion_matrix's keywords among classes, normalize, path, ax, "
                        f"xtick_rotation, figsize, cmap. Received: {sorted(unknown)}")
    new_figure = ax is None
    if new_figure:
        _, ax = plt.subplots(figsize=kwargs.get('figsize', (6, 6)))
    ax.imshow(matrix, cmap=kwargs.get('cmap', 'Blues'))
    ax.set(xticks=range(len(classes)), yticks=range(len(classes)), xlabel='Actual class', ylabel='Predicted class',
           title='Normalized confusion matrix' if normalize else 'Confusion matrix')
    ax.set_xticklabels(classes, rotation=xtick_rotation)
    ax.set_yticklabels(classes)
    middle = (np.nanmax(matrix) + np.nanmin(matrix)) / 2 if matrix.size else 0
    for (row, column), value in np.ndenumerate(matrix):
        ax.text(column, row, f'{value:.2f}' if normalize else f'{value:g}', ha='center', va='center',
                color='white' if value > middle else 'black')
    if path is not None or new_figure:
        finish_figure(ax.figure, path, f'{caller}.plot_confusion_matrix', stacklevel=4)
    return ax
