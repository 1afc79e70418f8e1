"""``plot``: batchflow's plotter of images (grids, titles, colour maps, masks over images), histograms, curves and
losses, on matplotlib.

The data says what goes where: an array (or a list of numbers) is one subplot; a flat list is one subplot with the arrays one over
another (``combine='overlay'``, the default) or one subplot each (``combine='separate'``); a list holding lists
(``combine='mixed'``, inferred) gives each inner list a subplot of its own, layered. A parameter given as a *list*
takes one item per subplot and, within a subplot, one per layer, as the data is nested (give pairs such as
``xlim=(0, 10)`` as tuples); any other value is shared by all.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from numbers import Number
from typing import Any

import numpy as np

from ..progress.plots import finish_figure, pyplot
from .layers import DRAW, annotate_subplot, prefixed

__all__ = ['Plot', 'plot']

COMBINES = ('overlay', 'separate', 'mixed')
FIGURE_KEYS = {'figsize', 'ncols', 'nrows', 'max_ncols', 'scale', 'suptitle', 'dpi', 'facecolor', 'sharex',
               'sharey', 'tight_layout'}
SUBPLOT_KEYS = {'title', 'xlabel', 'ylabel', 'xlim', 'ylim', 'log', 'colorbar', 'grid'}
LAYER_KEYS = {'cmap', 'alpha', 'vmin', 'vmax', 'vrange', 'mask', 'mask_color', 'transpose', 'extent', 'label',
              'color', 'linestyle', 'linewidth', 'bins', 'window', 'flatten'}
PREFIXES = ('figure', 'suptitle', 'title', 'xlabel', 'ylabel', 'colorbar', 'legend', 'grid', 'image', 'histogram',
            'curve', 'loss', 'lr')
# the colours of masks laid over an image, in turn, where no cmap is given for them
MASK_COLORS = ('mediumseagreen', 'orchid', 'darkorange', 'royalblue', 'gold', 'firebrick', 'turquoise', 'navy')


def _numpy(data: Any) -> Any:
    """Arrays as numpy (torch tensors detached and on the CPU); tuples item by item; ``None`` as it is."""
    if data is None:
        return None
    if isinstance(data, tuple):
        return tuple(_numpy(item) for item in data)
    if hasattr(data, 'detach'):
        return data.detach().cpu().numpy()
    return np.asarray(data)


def parse_data(data: Any, combine: str) -> tuple[list[list[Any]], str]:
    """The data as subplots of layers, and the combination it was read with."""
    if combine not in COMBINES:
        raise ValueError(f"Expected combine as one of {COMBINES}. Received: combine={combine!r}.")
    if not isinstance(data, list) or (data and all(isinstance(item, Number) for item in data)):
        return [[_numpy(data)]], 'overlay'        # a list of numbers is one array (a curve's values)
    if not data:
        raise ValueError("Expected data to plot. Received: an empty list. Pass an array or a list of arrays.")
    if any(isinstance(item, list) for item in data):
        return [[_numpy(layer) for layer in (item if isinstance(item, list) else [item])] for item in data], 'mixed'
    if combine == 'overlay':
        return [[_numpy(item) for item in data]], 'overlay'
    return [[_numpy(item)] for item in data], combine


def pick(key: str, value: Any, index: int | None, what: str) -> Any:
    """The item of a list-valued parameter for subplot or layer ``index``; other values as they are."""
    if index is None or not isinstance(value, list):
        return value
    if index >= len(value):
        raise ValueError(f"Expected {key} with an item for each {what} (a list is read one item per {what}). "
                         f"Received: {len(value)} items for {what} {index}. Add items, or give a tuple to share it.")
    return value[index]


def check_keys(config: Mapping[str, Any]) -> None:
    known = FIGURE_KEYS | SUBPLOT_KEYS | LAYER_KEYS
    unknown = sorted(key for key in config if key not in known and not key.startswith(tuple(p + '_' for p in PREFIXES)))
    if unknown:
        raise TypeError(f"Expected plot parameters among {sorted(known)} or prefixed with one of "
                        f"{[p + '_' for p in PREFIXES]}. Received: {unknown}. Check their spelling.")


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
    if mode != 'image':
        return 6 * scale, 4 * scale
    first = next((layer for layers in subplots for layer in layers if layer is not None), None)
    shape = np.shape(first)
    ratio = shape[0] / shape[1] if len(shape) >= 2 and shape[1] else 1.0
    return 5 * scale, 5 * scale * min(max(ratio, 0.25), 4.0)


class Plot:
    """Draw ``data`` on a new figure (or on ``axes``) and keep ``figure`` and ``axes`` (one per subplot).

    Args:
        data: an array (a torch tensor too), a tuple ``(x, y)`` (curves) or ``(loss, lr)`` (losses), or a list of
            them, flat or nested (see the module's description).
        mode: ``'image'``, ``'histogram'``, ``'curve'`` or ``'loss'``.
        combine: ``'overlay'``, ``'separate'`` or ``'mixed'`` for a flat list.
        axes: matplotlib axes to draw on (one per subplot) instead of a new figure.
        path: save the figure there (``savepath`` is batchflow's name); without it, a backend that shows nothing
            (a script's Agg) gets a ``UserWarning`` naming ``path=``.
        show: ``False`` closes the figure after drawing (and saving): nothing shows it.
        detach: batchflow's drawing or saving in a background thread (``True``, ``'save'``): accepted, and the
            figure is drawn and saved in the calling thread (matplotlib's figures are not thread-safe), so the file
            exists when the call returns.
        **kwargs: figure (``figsize``, ``ncols``, ``nrows``, ``max_ncols``, ``scale``, ``suptitle``, ``dpi``...),
            subplot (``title``, ``xlabel``, ``ylabel``, ``xlim``, ``ylim``, ``log``, ``colorbar``, ``grid``) and layer
            parameters (``cmap``, ``alpha``, ``vmin``, ``vmax``, ``vrange``, ``mask``, ``mask_color``, ``transpose``,
            ``label``, ``color``, ``bins``, ``window``...), and ``{prefix}_{name}`` arguments for one matplotlib
            call (``image_interpolation='nearest'``, ``title_size=10``, ``colorbar_label='m'``). Layers after the
            first of an image subplot are masks: a colour of their own, zeros transparent, ``alpha=0.5``, unless
            ``cmap``/``alpha`` say otherwise.
    """

    def __init__(self, data: Any, mode: str = 'image', combine: str = 'overlay', axes: Any = None,
                 path: str | os.PathLike | None = None, savepath: str | os.PathLike | None = None, show: bool = True,
                 detach: bool | str = False, **kwargs: Any) -> None:
        _check_detach(detach)
        if mode not in DRAW:
            raise ValueError(f"Expected mode as one of {sorted(DRAW)}. Received: mode={mode!r}.")
        check_keys(kwargs)
        plt = pyplot('plot()')
        self.mode, self.config = mode, kwargs
        self.subplots, self.combine = parse_data(data, combine)
        self.figure, self.axes = self._make_axes(plt, axes)
        for index, (ax, layers) in enumerate(zip(self.axes, self.subplots)):
            self._draw_subplot(ax, layers, None if self.combine == 'overlay' else index)
        self._annotate_figure()
        path = path if path is not None else savepath
        if path is not None or (axes is None and show):
            finish_figure(self.figure, path, 'plot', stacklevel=3)
        if not show:
            self.close()

    def _make_axes(self, plt: Any, axes: Any) -> tuple[Any, list]:
        count = len(self.subplots)
        if axes is not None:
            axes = list(np.ravel(axes))
            if len(axes) < count:
                raise ValueError(f"Expected an axes for each of the {count} subplots. Received: {len(axes)} axes.")
            return axes[0].figure, axes[:count]
        config = self.config
        nrows, ncols = grid_shape(count, config.get('ncols'), config.get('nrows'), config.get('max_ncols', 4))
        width, height = _subplot_size(self.mode, self.subplots, config.get('scale', 1.0))
        options = {key: config[key] for key in ('dpi', 'facecolor', 'sharex', 'sharey') if key in config}
        figure, grid = plt.subplots(nrows, ncols, squeeze=False, figsize=config.get('figsize', (width * ncols,
                                    height * nrows)), **options, **prefixed(config, 'figure'))
        for ax in grid.flat[count:]:
            ax.set_axis_off()
        return figure, list(grid.flat[:count])

    def _draw_subplot(self, ax: Any, layers: list[Any], index: int | None) -> None:
        params = {key: pick(key, value, index, 'subplot') for key, value in self.config.items()}
        artists, labels = [], []
        for number, layer in enumerate(layers):
            if layer is None:
                continue
            layer_params = {key: value if key in SUBPLOT_KEYS else pick(key, value, number, 'layer')
                            for key, value in params.items()}
            if self.mode == 'image' and number > 0:
                layer_params.setdefault('cmap', MASK_COLORS[(number - 1) % len(MASK_COLORS)])
                layer_params.setdefault('alpha', 0.5)
            artists.append(DRAW[self.mode](ax, layer, layer_params))
            labels.append(layer_params.get('label'))
        if not artists:
            ax.set_axis_off()
            return
        annotate_subplot(ax, self.mode, params, artists, labels)

    def _annotate_figure(self) -> None:
        if self.config.get('suptitle') is not None:
            self.figure.suptitle(self.config['suptitle'], **prefixed(self.config, 'suptitle'))
        if self.config.get('tight_layout', True):
            self.figure.tight_layout()

    def save(self, path: str | os.PathLike | None = None, savepath: str | os.PathLike | None = None,
             detach: bool = False, **kwargs: Any) -> None:
        """Save the figure (format from the extension); ``kwargs`` go to matplotlib's ``savefig``. ``detach``
        (batchflow's saving in a thread) is accepted; the file is written before ``save`` returns."""
        _check_detach(detach)
        path = path if path is not None else savepath
        if path is None:
            raise TypeError("Expected the file to save the figure to. Received: no path. Pass save('plot.png').")
        self.figure.savefig(os.fspath(path), **{'bbox_inches': 'tight', **kwargs})

    def close(self) -> None:
        """Close the figure (matplotlib forgets it; nothing shows it)."""
        pyplot().close(self.figure)

    def __repr__(self) -> str:
        return f"<Plot mode={self.mode!r} combine={self.combine!r}: {len(self.axes)} subplot(s)>"


plot = Plot  # batchflow's name: plot(data, ...) draws at once
