"""``plot``: batchflow's plotter of images (grids, titles, colour maps, masks over images), matrices (values written
in their cells), histograms, curves and losses, on matplotlib.

The data says what goes where: an array (or a list of numbers) is one subplot; a flat list is one subplot with the
arrays one over another (``combine='overlay'``, the default) or one subplot each (``combine='separate'``); a list
holding lists (``combine='mixed'``, inferred) gives each inner list a subplot of its own, layered. A parameter
given as a *list* takes one item per subplot and, within a subplot, one per layer, as the data is nested (give
pairs such as ``xlim=(0, 10)`` as tuples); any other value is shared by all.

The ``Plot`` returned can be drawn on again: ``plotter.plot(data, positions=[1, 3])`` fills other cells of its grid
(or lays more layers over a cell's), ``plotter[i]`` is the ``i``-th cell (a ``Subplot``: ``add_text``, ``clear``,
``plotter[i][j].update(new_data)``), and ``redraw()`` shows the figure again.
"""
from __future__ import annotations

import math
import os
from numbers import Integral, Number
from typing import Any

import numpy as np

from ..progress.plots import NON_INTERACTIVE, finish_figure, pyplot
from .layers import prefixed, text_and_options
from .subplot import FIGURE_KEYS, Subplot, as_numpy, check_keys, check_mode, pick

__all__ = ['Plot', 'plot']

COMBINES = ('overlay', 'separate', 'mixed')
# figure parameters that shape a new figure: a later plot() call on the figure may not give them
LAYOUT_KEYS = FIGURE_KEYS - {'suptitle', 'tight_layout'}


def parse_data(data: Any, combine: str) -> tuple[list[list[Any]], str]:
    """The data as subplots of layers, and the combination it was read with."""
    if combine not in COMBINES:
        raise ValueError(f"Expected combine as one of {COMBINES}. Received: combine={combine!r}.")
    if not isinstance(data, list) or (data and all(isinstance(item, Number) for item in data)):
        return [[as_numpy(data)]], 'overlay'        # a list of numbers is one array (a curve's values)
    if not data:
        raise ValueError("Expected data to plot. Received: an empty list. Pass an array or a list of arrays.")
    if any(isinstance(item, list) for item in data):
        return [[as_numpy(layer) for layer in (item if isinstance(item, list) else [item])] for item in data], 'mixed'
    if combine == 'overlay':
        return [[as_numpy(item) for item in data]], 'overlay'
    return [[as_numpy(item)] for item in data], combine


def _check_detach(detach: Any) -> None:
    if detach not in (True, False, 'save'):
        raise ValueError(f"Expected detach as True, False or 'save'. Received: detach={detach!r}.")


def grid_shape(n: int, ncols: int | None, nrows: int | None, max_ncols: int) -> tuple[int, int]:
    """``(nrows, ncols)`` for ``n`` subplots: at most ``max_ncols`` columns unless told otherwise."""
    if ncols is None and nrows is None:
        ncols = min(n, max_ncols)
    if ncols is None:
        ncols = math.ceil(n / nrows)
    nrows = math.ceil(n / ncols) if nrows is None else nrows
    if ncols * nrows < n:
        raise ValueError(f"Expected room for {n} subplots. Received: ncols={ncols}, nrows={nrows}. Leave one of them "
                         "out to have it computed.")
    return nrows, ncols


def _subplot_size(mode: str, subplots: list[list[Any]], scale: float) -> tuple[float, float]:
    if mode not in ('image', 'matrix'):
        return 6 * scale, 4 * scale
    first = next((layer for layers in subplots for layer in layers if layer is not None), None)
    shape = np.shape(first)
    ratio = shape[0] / shape[1] if len(shape) >= 2 and shape[1] else 1.0
    return 5 * scale, 5 * scale * min(max(ratio, 0.25), 4.0)


def _positions(positions: Any, count: int, cells: int | None) -> list[int]:
    """The grid cells the data's ``count`` subplots go to: ``0, 1, ...`` by default; within ``cells`` if given."""
    if positions is None:
        return list(range(count))
    positions = [positions] if isinstance(positions, Integral) else list(positions)
    if (len(positions) != count or len(set(positions)) != count
            or any(isinstance(item, bool) or not isinstance(item, Integral) or item < 0 for item in positions)):
        raise ValueError(f"Expected positions as {count} different cell numbers (from 0), one per subplot of the "
                         f"data. Received: positions={positions!r}.")
    if cells is not None and max(positions) >= cells:
        raise ValueError(f"Expected positions among the plot's {cells} cells (0 to {cells - 1}). Received: "
                         f"positions={positions!r}. Make room on the first call (ncols=, nrows=, None in the data).")
    return [int(item) for item in positions]


class Plot:
    """Draw ``data`` on a new figure (or on ``axes``) and keep ``figure``, ``subplots`` (a ``Subplot`` per cell of
    the grid; ``plotter[i]``) and ``axes`` (the axes of the cells given data, in grid order).

    Args:
        data: an array (a torch tensor too), a tuple ``(x, y)`` (curves) or ``(loss, lr)`` (losses), or a list of
            them, flat or nested (see the module's description); ``None`` in a list leaves a cell empty.
        mode: ``'image'``, ``'matrix'``, ``'histogram'``, ``'curve'`` or ``'loss'``.
        combine: ``'overlay'``, ``'separate'`` or ``'mixed'`` for a flat list.
        positions: the grid cells the subplots go to (by default ``0, 1, ...``); the grid has room for the
            largest. A later ``plot`` call draws on these cells of the same figure.
        axes: matplotlib axes to draw on (one per cell) instead of a new figure.
        path: save the figure there (``savepath`` is batchflow's name); without it, a backend that shows nothing
            (a script's Agg) gets a ``UserWarning`` naming ``path=``.
        show: ``False`` closes the figure after drawing (and saving): nothing shows it.
        detach: batchflow's drawing or saving in a background thread (``True``, ``'save'``): accepted, and the
            figure is drawn and saved in the calling thread (matplotlib's figures are not thread-safe), so the file
            exists when the call returns.
        **kwargs: figure (``figsize``, ``ncols``, ``nrows``, ``max_ncols``, ``scale``, ``suptitle``, ``dpi``...),
            subplot (``title``, ``xlabel``, ``ylabel``, ``xlim``, ``ylim``, ``log``, ``colorbar``, ``grid``) and layer
            parameters (``cmap``, ``alpha``, ``vmin``, ``vmax``, ``vrange``, ``mask``, ``mask_color``, ``transpose``,
            ``dilate``, ``label``, ``color``, ``bins``, ``window``...), and ``{prefix}_{name}`` arguments for one
            matplotlib call (``image_interpolation='nearest'``, ``title_size=10``, ``xtick_labels=[...]``,
            ``label_format='.3f'`` for a matrix's cells). Layers after the first of an image subplot are masks: a
            colour of their own, zeros transparent, ``alpha=0.5``, unless ``cmap``/``alpha`` say otherwise.
    """

    def __init__(self, data: Any = None, mode: str = 'image', combine: str = 'overlay', axes: Any = None,
                 path: str | os.PathLike | None = None, savepath: str | os.PathLike | None = None, show: bool = True,
                 detach: bool | str = False, positions: Any = None, **kwargs: Any) -> None:
        self.figure: Any = None
        self.subplots: list[Subplot] = []
        self.plot(data, mode=mode, combine=combine, positions=positions, axes=axes, path=path, savepath=savepath,
                  show=show, detach=detach, **kwargs)

    def plot(self, data: Any = None, *, mode: str = 'image', combine: str = 'overlay', positions: Any = None,
             axes: Any = None, path: str | os.PathLike | None = None, savepath: str | os.PathLike | None = None,
             show: bool = True, detach: bool | str = False, **kwargs: Any) -> Plot:
        """Draw ``data`` on the figure: the first call (``Plot(...)``) makes it; a later one draws on the cells
        ``positions`` names (``0, 1, ...`` by default), over what they hold, with its own parameters (the
        figure's layout, ``figsize``, ``ncols``..., only on the first). Returns the plot. The parameters after
        ``data`` are keywords (batchflow's ``Plot`` and ``Plot.plot`` take ``mode`` and ``combine`` in different
        orders)."""
        _check_detach(detach)
        check_mode(mode)
        check_keys(kwargs)
        subplots, combine = parse_data(data, combine)
        fresh = self.figure is None
        positions = _positions(positions, len(subplots), None if fresh else len(self.subplots))
        if fresh:
            self._make_subplots(axes, mode, subplots, max(positions) + 1, kwargs)
        else:
            self._check_later_call(axes, kwargs)
        self.mode, self.combine, self.config = mode, combine, kwargs
        for number, (position, layers) in enumerate(zip(positions, subplots)):
            index = None if combine == 'overlay' else number
            params = {} if all(layer is None for layer in layers) else {   # an empty cell reads no parameters
                key: pick(key, value, index, 'subplot') for key, value in kwargs.items() if key not in FIGURE_KEYS}
            self.subplots[position].draw(layers, mode, params)
        self._annotate_figure()
        path = path if path is not None else savepath
        if path is not None:
            self.save(path)
        elif axes is None and show:
            finish_figure(self.figure, None, 'plot', stacklevel=3 if fresh else 2)
        if not show:
            self.close()
        return self

    __call__ = plot

    def _make_subplots(self, axes: Any, mode: str, subplots: list[list[Any]], count: int,
                       config: dict[str, Any]) -> None:
        plt = pyplot('plot()')
        if axes is not None:
            axes = list(np.ravel(axes))
            if len(axes) < count:
                raise ValueError(f"Expected an axes for each of the {count} subplots. Received: {len(axes)} axes.")
            self.figure = axes[0].figure
        else:
            nrows, ncols = grid_shape(count, config.get('ncols'), config.get('nrows'), config.get('max_ncols', 4))
            width, height = _subplot_size(mode, subplots, config.get('scale', 1.0))
            options = {key: config[key] for key in ('dpi', 'facecolor', 'sharex', 'sharey') if key in config}
            self.figure, grid = plt.subplots(nrows, ncols, squeeze=False, figsize=config.get(
                'figsize', (width * ncols, height * nrows)), **options, **prefixed(config, 'figure'))
            axes = list(grid.flat)
            for ax in axes:
                ax.set_axis_off()       # until something is drawn on it
        self.subplots = [Subplot(ax, index) for index, ax in enumerate(axes)]

    @staticmethod
    def _check_later_call(axes: Any, config: dict[str, Any]) -> None:
        layout = sorted(key for key in config if key in LAYOUT_KEYS or key.startswith('figure_'))
        if axes is not None or layout:
            received = f"axes={axes!r}" if axes is not None else f"{layout}"
            raise ValueError(f"Expected the figure's axes and layout on the first plot call only (the figure exists). "
                             f"Received: {received}. Make a new plot(...) for another layout.")

    def _annotate_figure(self) -> None:
        if self.config.get('suptitle') is not None:
            text, options = text_and_options(self.config, 'suptitle')
            self.figure.suptitle(text, **options)
        if self.config.get('tight_layout', True):
            self.figure.tight_layout()

    @property
    def axes(self) -> list:
        """The matplotlib axes of the cells given data (``None`` items too), in grid order."""
        return [subplot.ax for subplot in self.subplots if subplot.placed]

    def __getitem__(self, index: int) -> Subplot:
        """The ``index``-th cell of the grid (negative from the end), given data or not."""
        if isinstance(index, bool) or not isinstance(index, Integral):
            raise TypeError(f"Expected a subplot's index as an int. Received: {type(index).__name__} {index!r}.")
        return self.subplots[index]

    def save(self, path: str | os.PathLike | None = None, savepath: str | os.PathLike | None = None,
             detach: bool = False, **kwargs: Any) -> None:
        """Save the figure (format from the extension); ``kwargs`` go to matplotlib's ``savefig``. ``detach``
        (batchflow's saving in a thread) is accepted; the file is written before ``save`` returns."""
        _check_detach(detach)
        path = path if path is not None else savepath
        if path is None:
            raise TypeError("Expected the file to save the figure to. Received: no path. Pass save('plot.png').")
        self.figure.savefig(os.fspath(path), **{'bbox_inches': 'tight', **kwargs})

    def show(self) -> None:
        """Show the figure now: in a notebook (matplotlib's inline backend), under the running cell, after which
        pyplot lets it go (the cell's end does not show it twice); with a window backend, in its window; on a
        backend that shows nothing (a script's Agg), a ``UserWarning`` names ``path=`` instead."""
        self._show(stacklevel=3)

    def redraw(self) -> None:
        """Lay the figure out again (after later ``plot`` calls, ``update``s, texts) and show it as ``show``."""
        if self.config.get('tight_layout', True):
            self.figure.tight_layout()
        self._show(stacklevel=3)

    def _show(self, stacklevel: int) -> None:
        plt = pyplot()
        backend = str(plt.get_backend()).lower()
        if backend in NON_INTERACTIVE:
            finish_figure(self.figure, None, 'Plot.show', stacklevel=stacklevel)
        elif 'inline' in backend:
            from IPython.display import display
            display(self.figure)
            plt.close(self.figure)
        else:
            manager = self.figure.canvas.manager
            if manager is None or not plt.fignum_exists(manager.num):
                raise ValueError("Expected a figure pyplot holds to show in a window. Received: a figure closed "
                                 "(show=False, plt.close) or made without pyplot. Save it with save('plot.png').")
            self.figure.canvas.draw_idle()
            self.figure.show()

    def _ipython_display_(self) -> None:
        """In a notebook, the figure in place of the object's text (batchflow shows nothing for a plotter)."""
        if 'inline' in str(pyplot().get_backend()).lower():
            self._show(stacklevel=3)
        else:
            print(repr(self))

    def close(self) -> None:
        """Close the figure (matplotlib forgets it; nothing shows it)."""
        pyplot().close(self.figure)

    def __repr__(self) -> str:
        return f"<Plot mode={self.mode!r} combine={self.combine!r}: {len(self.axes)} subplot(s)>"


plot = Plot  # batchflow's name: plot(data, ...) draws at once
