"""Plots of variable histories (``Pipeline.plot``), with matplotlib, which flowpipe does not depend on.

``pyplot()`` imports ``matplotlib.pyplot`` or raises an ``ImportError`` that names the extra to install
(``pip install 'flowpipe[notebooks]'``); ``plot_histories`` draws lists of numbers against their position.
``finish_figure`` saves a figure to ``path=``, or warns when nothing would ever show it: in a script,
matplotlib's non-interactive backend (Agg, picked where there is no display) draws into memory only.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ['finish_figure', 'plot_histories', 'pyplot']

# matplotlib's backends that draw into memory or files only: a figure on them is never shown on a screen
NON_INTERACTIVE = frozenset({'agg', 'cairo', 'pdf', 'pgf', 'ps', 'svg', 'template'})


def pyplot(purpose: str = 'plotting') -> Any:
    """``matplotlib.pyplot``, or an ``ImportError`` saying how to install it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as error:
        raise ImportError(f"Expected matplotlib for {purpose}. Received: no module named 'matplotlib'. Install "
                          "it with pip install 'flowpipe[notebooks]' (or pip install matplotlib).") from error
    return plt


def finish_figure(figure: Any, path: str | os.PathLike | None, caller: str, stacklevel: int = 3) -> None:
    """Save ``figure`` to ``path`` (format from its extension); without a path, warn where it shows nowhere.

    Args:
        figure: a matplotlib figure.
        path: the file to write, or ``None`` to leave the figure to the notebook or window that shows it.
        caller: the call to name in the warning, e.g. ``'Pipeline.plot'``.
        stacklevel: the warning's stack level, so that it points at the user's line.
    """
    if path is not None:
        figure.savefig(os.fspath(path), bbox_inches='tight')
        return
    backend = str(pyplot().get_backend()).lower()
    if backend in NON_INTERACTIVE:
        warnings.warn(f"{caller}() drew a figure that nothing shows: matplotlib's backend is {backend!r}, which "
                      f"draws into memory only (a script, or no display). Pass path='plot.png' to save it to a "
                      f"file, or choose an interactive backend and call matplotlib.pyplot.show().", UserWarning,
                      stacklevel=stacklevel + 1)


def _numbers(name: str, values: Any) -> np.ndarray:
    """A history as floats: numbers as they are, arrays by their mean, ``None`` as a gap."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"Expected variable {name!r} to hold a list of numbers (fill it with save_to=V({name!r}, "
                        f"mode='a')). Received: {type(values).__name__} {values!r:.60}.")
    try:
        return np.array([np.nan if value is None else float(np.mean(value)) for value in values], dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"Expected variable {name!r} to hold numbers or arrays of numbers. Received: "
                        f"{values!r:.80}.") from None


def plot_histories(histories: Mapping[str, Any], window: int | None = None, ax: Any = None,
                   logy: bool = False, xlabel: str = 'batch', path: str | os.PathLike | None = None,
                   caller: str = 'plot_histories') -> Any:
    """Draw each history against its position; returns the matplotlib axes.

    Args:
        histories: ``{label: list of numbers}``.
        window: also draw the mean of every ``window`` consecutive values (the raw values fade behind it).
        ax: the axes to draw on; a new figure by default.
        logy: a logarithmic y axis.
        xlabel: the x axis label.
        path: save the figure to this file (``'loss.png'``, ``'loss.pdf'``). Without it and without ``ax``,
            a backend that shows nothing (a script's Agg) gets a ``UserWarning`` that names ``path=``.
        caller: the name the warning gives the call.
    """
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise ValueError(f"Expected window as a positive int (values per moving mean) or None. Received: {window!r}.")
    plt = pyplot('plot()')
    new_figure = ax is None
    if new_figure:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    for label, values in histories.items():
        numbers = _numbers(label, values)
        smooth = window is not None and window > 1 and len(numbers) >= window
        (line,) = ax.plot(numbers, linewidth=1, alpha=0.35 if smooth else 1.0, label=None if smooth else label)
        if smooth:
            mean = np.convolve(numbers, np.ones(window) / window, mode='valid')
            ax.plot(np.arange(window - 1, len(numbers)), mean, color=line.get_color(), linewidth=2,
                    label=f'{label} (mean of {window})')
    if logy:
        ax.set_yscale('log')
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    if path is not None or new_figure:
        # axes given by the caller belong to a figure the caller shows or saves
        finish_figure(ax.figure, path, caller, stacklevel=3)
    return ax
