"""One cell of a ``Plot``'s grid (``Subplot``: its axes, the layers drawn on it, its colour bar) and one layer drawn
on it (``Layer``: its artist, which ``update`` gives new data in place), with the parameter names ``plot`` takes
and how a list-valued parameter is read (one item per subplot, then per layer).
"""
from __future__ import annotations

from collections.abc import Mapping
from numbers import Number
from typing import Any

import numpy as np

from .layers import DRAW as LAYER_DRAW
from .layers import annotate_subplot, prepare_image, value_range, xy
from .matrix import draw_matrix

__all__ = ['DRAW', 'Layer', 'Subplot', 'as_numpy', 'check_keys', 'pick']

DRAW = {**LAYER_DRAW, 'matrix': draw_matrix}
FIGURE_KEYS = {'figsize', 'ncols', 'nrows', 'max_ncols', 'scale', 'suptitle', 'dpi', 'facecolor', 'sharex',
               'sharey', 'tight_layout'}
SUBPLOT_KEYS = {'title', 'xlabel', 'ylabel', 'xlim', 'ylim', 'log', 'colorbar', 'grid'}
LAYER_KEYS = {'cmap', 'alpha', 'vmin', 'vmax', 'vrange', 'mask', 'mask_color', 'transpose', 'extent', 'label',
              'color', 'linestyle', 'linewidth', 'bins', 'window', 'flatten', 'dilate', 'augment_mask',
              'final_window', 'log_lr'}
PREFIXES = ('figure', 'suptitle', 'title', 'xlabel', 'ylabel', 'xtick', 'ytick', 'colorbar', 'legend', 'grid',
            'image', 'matrix', 'label', 'histogram', 'curve', 'loss', 'lr')
# prefixes of a subplot's parameters (not read per layer): a list is one subplot's value, such as tick labels
SUBPLOT_PREFIXES = ('title_', 'xlabel_', 'ylabel_', 'xtick_', 'ytick_', 'colorbar_', 'legend_', 'grid_')
# the colours of masks laid over an image, in turn, where no cmap is given for them
MASK_COLORS = ('mediumseagreen', 'orchid', 'darkorange', 'royalblue', 'gold', 'firebrick', 'turquoise', 'navy')


def as_numpy(data: Any) -> Any:
    """Arrays as numpy (torch tensors detached and on the CPU); tuples item by item; ``None`` as it is."""
    if data is None:
        return None
    if isinstance(data, tuple):
        return tuple(as_numpy(item) for item in data)
    if hasattr(data, 'detach'):
        return data.detach().cpu().numpy()
    return np.asarray(data)


def pick(key: str, value: Any, index: int | None, what: str) -> Any:
    """The item of a list-valued parameter for subplot or layer ``index``; other values as they are."""
    if index is None or not isinstance(value, list):
        return value
    if index >= len(value):
        raise ValueError(f"Expected {key} with an item for each {what} (a list is read one item per {what}). "
                         f"Received: {len(value)} items for {what} {index}. Add items, or give a tuple to share it.")
    return value[index]


def check_keys(config: Mapping[str, Any], known: set | None = None) -> None:
    """A ``TypeError`` naming the parameters ``plot`` does not know."""
    known = FIGURE_KEYS | SUBPLOT_KEYS | LAYER_KEYS if known is None else known
    prefixes = tuple(prefix + '_' for prefix in PREFIXES)
    unknown = sorted(key for key in config if key not in known and not key.startswith(prefixes))
    if unknown:
        raise TypeError(f"Expected plot parameters among {sorted(known)} or prefixed with one of "
                        f"{[p + '_' for p in PREFIXES]}. Received: {unknown}. Check their spelling.")


def check_mode(mode: str) -> None:
    if mode not in DRAW:
        raise ValueError(f"Expected mode as one of {sorted(DRAW)}. Received: mode={mode!r}.")


def _mask_defaults(data: np.ndarray, params: dict[str, Any], number: int) -> None:
    """An image layer's defaults as a mask: over another layer (``number > 0``), a colour of its own and
    ``alpha=0.5`` unless given; with ``augment_mask`` (batchflow's), a layer of zeros and ones in a colour of its
    own even where ``cmap`` names a colour map (zeros transparent, as for any single colour)."""
    from matplotlib.colors import is_color_like
    color = MASK_COLORS[max(number - 1, 0) % len(MASK_COLORS)]
    if number > 0:
        params.setdefault('cmap', color)
        params.setdefault('alpha', 0.5)
    cmap = params.get('cmap')
    if params.get('augment_mask') and not (isinstance(cmap, (str, tuple)) and is_color_like(cmap)):
        values = np.asarray(data)
        if values.dtype != object and np.isin(values, (0, 1)).all():
            params['cmap'] = color


class Layer:
    """One array drawn on a subplot: ``artist`` is what matplotlib drew (an image, a line, a histogram's first
    bar), ``params`` the parameters it was drawn with."""

    def __init__(self, subplot: Subplot, mode: str, params: Mapping[str, Any], artist: Any) -> None:
        self.subplot, self.mode, self.params, self.artist = subplot, mode, dict(params), artist

    def update(self, data: Any) -> None:
        """Draw ``data`` in place of the layer's (in ``'image'`` mode: through the same parameters, colour limits
        computed anew; in ``'curve'`` mode: ``y`` or ``(x, y)``, the axes' limits fitted anew). Call the plot's
        ``redraw()`` to show the change."""
        data = as_numpy(data)
        if self.mode == 'image':
            prepared, _ = prepare_image(data, self.params)
            self.artist.set_data(prepared)
            self.artist.autoscale()
            self.artist.set_clim(*value_range(prepared, self.params))
        elif self.mode == 'curve':
            self.artist.set_data(*xy(data))
            self.subplot.ax.relim()
            self.subplot.ax.autoscale_view()
        else:
            raise ValueError(f"Expected a layer of mode 'image' or 'curve' to update in place. Received: a layer of "
                             f"mode {self.mode!r}. Call subplot.clear() and draw it again: plotter[i](data, "
                             f"mode={self.mode!r}).")

    def __repr__(self) -> str:
        return f"<Layer mode={self.mode!r}: {type(self.artist).__name__}>"


class Subplot:
    """A cell of the grid: ``ax`` (its matplotlib axes), ``layers`` drawn on it, ``colorbar`` (or ``None``).
    ``subplot[i]`` is its ``i``-th layer; ``subplot(data, mode=..., **parameters)`` draws more layers over it."""

    def __init__(self, ax: Any, index: int) -> None:
        self.ax, self.index = ax, index
        self.layers: list[Layer] = []
        self.colorbar: Any = None
        self.placed = False         # whether a plot call gave this cell data (its axes are in Plot.axes)

    @property
    def empty(self) -> bool:
        """Whether nothing is drawn on the subplot."""
        return not self.layers

    def __getitem__(self, index: int) -> Layer:
        if not isinstance(index, int):
            raise TypeError(f"Expected a layer's index as an int. Received: {type(index).__name__} {index!r}.")
        return self.layers[index]

    def __len__(self) -> int:
        return len(self.layers)

    def plot(self, data: Any, mode: str = 'image', **kwargs: Any) -> Subplot:
        """Draw ``data`` (an array, or a list of arrays: layers, one over another) over the subplot's layers;
        ``kwargs`` are ``plot``'s subplot and layer parameters (a list gives one item per layer)."""
        check_mode(mode)
        check_keys(kwargs, SUBPLOT_KEYS | LAYER_KEYS)
        layers = data if isinstance(data, list) and not all(isinstance(item, Number) for item in data) else [data]
        self.draw([as_numpy(layer) for layer in layers], mode, kwargs)
        return self

    __call__ = plot

    def draw(self, layers: list[Any], mode: str, params: Mapping[str, Any]) -> None:
        """Draw ``layers`` with ``params`` already picked for this subplot (list values: one item per layer)."""
        self.placed = True
        artists, labels, start = [], [], len(self.layers)
        for index, layer in enumerate(layers):
            if layer is None:
                continue
            layer_params = {key: value if key in SUBPLOT_KEYS or key.startswith(SUBPLOT_PREFIXES)
                            else pick(key, value, index, 'layer') for key, value in params.items()}
            if mode == 'image':
                _mask_defaults(layer, layer_params, start + index)
            artists.append(DRAW[mode](self.ax, layer, layer_params))
            labels.append(layer_params.get('label'))
            self.layers.append(Layer(self, mode, layer_params, artists[-1]))
        if not artists:
            if self.empty:
                self.ax.set_axis_off()
            return
        self.ax.set_axis_on()
        colorbar = annotate_subplot(self.ax, mode, params, artists, labels)
        if colorbar is not None:            # one colour bar a subplot: of the latest layers that asked for it
            if self.colorbar is not None:
                self.colorbar.remove()
            self.colorbar = colorbar

    def add_text(self, text: str, size: float = 10, x: float = 0.5, y: float = 0.5, ha: str = 'center',
                 va: str = 'center', bbox: Mapping[str, Any] | str | None = 'default', **kwargs: Any) -> Any:
        """Write ``text`` at ``(x, y)`` in data coordinates (the middle of an empty subplot: its axes run from 0
        to 1; ``transform=plotter[i].ax.transAxes`` for the axes' own) in a box: ``'default'`` (a frame without
        fill), a dict of ``FancyBboxPatch`` properties, or ``None``; ``kwargs`` go to ``Axes.text``."""
        if bbox == 'default':
            bbox = {'boxstyle': 'square', 'facecolor': 'none'}
        return self.ax.text(x, y, text, size=size, ha=ha, va=va, bbox=bbox, **kwargs)

    def enable(self) -> None:
        """Show the subplot's axes."""
        self.ax.set_axis_on()

    def disable(self) -> None:
        """Hide the subplot's axes."""
        self.ax.set_axis_off()

    def clear(self) -> None:
        """Remove the layers, texts, colour bar and annotations (the cell stays, empty, to draw on again)."""
        if self.colorbar is not None:
            self.colorbar.remove()
        self.colorbar, self.layers = None, []
        self.ax.clear()

    def __repr__(self) -> str:
        return f"<Subplot {self.index}: {len(self.layers)} layer(s)>"

