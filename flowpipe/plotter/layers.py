"""What one layer of a subplot draws (an image, a histogram, a curve, a loss) and what a subplot adds over its
layers (title, labels, limits, colour bar, legend), from parameters already picked for that layer or subplot.

Each ``draw_*`` takes the axes, the layer's data (a numpy array, or a tuple of them) and the layer's parameters
(a dict; ``image_*``, ``histogram_*``, ``curve_*`` and ``loss_*`` entries go to matplotlib's call as they are), and
returns the artist a legend or a colour bar refers to.
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from numbers import Number
from typing import Any

import numpy as np

from .morphology import dilated

__all__ = ['DRAW', 'annotate_subplot', 'batchflow_colormap', 'prefixed', 'prepare_image', 'text_and_options',
           'value_range', 'wrap', 'xy']

# the comparisons a string value of ``mask`` may start with ('<0.5', '==2', '>=1000')
COMPARISONS = {'<=': operator.le, '>=': operator.ge, '==': operator.eq, '!=': operator.ne, '<': operator.lt,
               '>': operator.gt}
TRANSPARENT = (0.0, 0.0, 0.0, 0.0)


def prefixed(params: Mapping[str, Any], prefix: str) -> dict:
    """The ``{prefix}_{name}`` entries of ``params`` as ``{name: value}`` (extra arguments for one matplotlib call)."""
    start = prefix + '_'
    return {key[len(start):]: value for key, value in params.items() if key.startswith(start)}


def _condition_mask(data: np.ndarray, condition: Any) -> np.ndarray:
    if isinstance(condition, Number):
        return data == condition
    if isinstance(condition, str):
        for symbol, compare in COMPARISONS.items():
            if condition.startswith(symbol):
                return compare(data, float(condition[len(symbol):]))
    if callable(condition):
        return np.asarray(condition(data), dtype=bool)
    raise ValueError(f"Expected mask as a number, a comparison such as '<0.5' or '==2', a callable or a tuple of "
                     f"them. Received: mask={condition!r}.")


def masked(data: np.ndarray, conditions: Any) -> np.ndarray:
    """``data`` with NaNs and the values matching ``conditions`` masked (not drawn)."""
    if conditions is None:
        return data
    mask = np.isnan(data) if np.issubdtype(data.dtype, np.floating) else np.zeros(data.shape, dtype=bool)
    for condition in conditions if isinstance(conditions, tuple) else (conditions,):
        mask |= _condition_mask(data, condition)
    return np.ma.masked_array(data, mask=mask)


def batchflow_colormap() -> Any:
    """``cmap='batchflow'`` (batchflow's own colour map): magma, its top tenth running on into white."""
    from matplotlib import colormaps, colors
    magma = colormaps['magma'](np.linspace(0, 1, 230))
    top = np.linspace(magma[-1], colors.to_rgba('white'), 27)[1:]
    return colors.ListedColormap(np.vstack([magma, top]), name='batchflow')


def _colormap(cmap: Any, mask_color: Any) -> tuple[Any, bool]:
    """A matplotlib colormap for ``cmap``, and whether it is a single colour (nonzero values in that colour)."""
    from matplotlib import colormaps, colors
    cmap = batchflow_colormap() if isinstance(cmap, str) and cmap == 'batchflow' else cmap
    single = isinstance(cmap, str) and cmap not in colormaps and colors.is_color_like(cmap)
    if single or (isinstance(cmap, tuple) and colors.is_color_like(cmap)):
        colormap = colors.ListedColormap([cmap])
    elif isinstance(cmap, str) and cmap not in colormaps:
        raise ValueError(f"Expected cmap as a matplotlib colour map's name, a colour or a Colormap. Received: "
                         f"cmap={cmap!r}. See matplotlib.colormaps for the names.")
    else:
        colormap = colormaps[cmap] if isinstance(cmap, str) else cmap
    colormap = colormap.with_extremes(bad=TRANSPARENT if mask_color is None else mask_color)
    return colormap, single or isinstance(cmap, tuple)


def value_range(data: np.ndarray, params: Mapping[str, Any]) -> tuple[Any, Any]:
    """``vmin``/``vmax`` as given (a string is a quantile of the data), or symmetric about 0 from ``vrange``."""
    vrange = params.get('vrange')
    if vrange is not None:
        if isinstance(vrange, (tuple, list)):
            return tuple(vrange)
        limit = float(np.nanmax(np.abs(data))) if vrange is True else float(vrange)
        return -limit, limit
    limits = []
    for key in ('vmin', 'vmax'):
        value = params.get(key)
        limits.append(float(np.nanquantile(np.ma.filled(data, np.nan), float(value)))
                      if isinstance(value, str) else value)
    return limits[0], limits[1]


def _image_array(data: np.ndarray, transpose: Any) -> np.ndarray:
    if transpose is not None:
        data = np.transpose(data, transpose)
    if data.ndim == 1:
        data = data[None]
    if data.ndim == 3 and data.shape[-1] == 1:
        data = data[..., 0]
    if data.ndim == 2 or (data.ndim == 3 and data.shape[-1] in (3, 4)):
        return data
    raise ValueError(f"Expected an image as (height, width) or (height, width, 1, 3 or 4 channels). Received: shape "
                     f"{data.shape}. Pass transpose=(1, 2, 0) for channels first.")


def prepare_image(data: np.ndarray, params: Mapping[str, Any]) -> tuple[np.ndarray, Any]:
    """The array ``imshow`` gets (transposed, dilated, values masked) and its colour map: a single colour as
    ``cmap`` leaves zeros transparent (a mask over an image)."""
    data = _image_array(np.asarray(data), params.get('transpose'))
    data = dilated(data, params.get('dilate'))
    colormap, single = _colormap(params.get('cmap', 'Greys_r'), params.get('mask_color'))
    if single:
        data = np.ma.masked_equal(data, 0)
    return masked(data, params.get('mask')), colormap


def draw_image(ax: Any, data: np.ndarray, params: Mapping[str, Any]) -> Any:
    """``imshow`` of a 2-d array (through ``cmap``) or of RGB(A); a single colour as ``cmap`` draws the nonzero
    values in that colour and leaves zeros transparent (a mask over an image)."""
    data, colormap = prepare_image(data, params)
    vmin, vmax = value_range(data, params)
    options = {'alpha': params.get('alpha'), 'extent': params.get('extent'), **prefixed(params, 'image')}
    return ax.imshow(data, cmap=colormap, vmin=vmin, vmax=vmax, **options)


def draw_histogram(ax: Any, data: np.ndarray, params: Mapping[str, Any]) -> Any:
    """A histogram of the values (flattened; masked and NaN values left out)."""
    values = masked(np.asarray(data, dtype=float), params.get('mask'))
    values = np.ma.compressed(values) if params.get('flatten', True) else values
    options = {'color': params.get('color'), 'alpha': params.get('alpha', 0.8), 'label': params.get('label'),
               **prefixed(params, 'histogram')}
    _, _, patches = ax.hist(values, bins=params.get('bins', 50), **options)
    return patches[0] if len(patches) else None


def xy(data: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(data, tuple):
        if len(data) != 2:
            raise ValueError(f"Expected a curve as y or as a tuple (x, y). Received: a tuple of {len(data)}.")
        return np.asarray(data[0]), np.asarray(data[1])
    values = np.asarray(data)
    return np.arange(len(values)), values


def draw_curve(ax: Any, data: Any, params: Mapping[str, Any]) -> Any:
    """A line through ``y`` (against its positions) or through ``(x, y)``."""
    x, y = xy(data)
    options = {'color': params.get('color'), 'alpha': params.get('alpha'), 'linestyle': params.get('linestyle'),
               'linewidth': params.get('linewidth'), 'label': params.get('label'), **prefixed(params, 'curve')}
    (line,) = ax.plot(x, y, **{key: value for key, value in options.items() if value is not None})
    return line


def draw_loss(ax: Any, data: Any, params: Mapping[str, Any]) -> Any:
    """A loss against iterations, faded behind its moving mean over ``window`` values; from ``(loss, lr)`` the
    learning rate too, on its own y axis at the right."""
    loss, lr = data if isinstance(data, tuple) else (data, None)
    loss = np.asarray(loss, dtype=float)
    window = params.get('window', 20)
    smooth = window is not None and 1 < window <= len(loss)
    options = {'color': params.get('color'), **prefixed(params, 'loss')}
    label = params.get('label', 'loss')
    if params.get('final_window') is not None:      # the mean of the last values in the legend
        count = min(int(params['final_window']), len(loss))
        label = f"{label} (mean of the last {count}: {np.mean(loss[-count:]):.4g})"
    (line,) = ax.plot(loss, alpha=0.35 if smooth else 1.0, label=label, **options)
    if smooth:
        mean = np.convolve(loss, np.ones(window) / window, mode='valid')
        ax.plot(np.arange(window - 1, len(loss)), mean, color=line.get_color(), linewidth=2,
                label=f"{params.get('label', 'loss')} (mean of {window})")
    if lr is not None:
        lr_ax = ax.twinx()
        lr_options = {'color': 'sandybrown', 'label': 'learning rate', **prefixed(params, 'lr')}
        lr_ax.plot(np.asarray(lr, dtype=float), **lr_options)
        lr_ax.set_ylabel('learning rate')
        if params.get('log_lr'):
            lr_ax.set_yscale('log')
    return line


DRAW: dict[str, Callable[[Any, Any, Mapping[str, Any]], Any]] = {
    'image': draw_image, 'histogram': draw_histogram, 'curve': draw_curve, 'loss': draw_loss}
SUBPLOT_DEFAULTS = {'histogram': {'xlabel': 'Values', 'ylabel': 'Counts'}, 'matrix': {'colorbar': True},
                    'loss': {'xlabel': 'Iterations', 'ylabel': 'Loss'}}


def _legend_handle(artist: Any, label: str) -> Any:
    """A legend entry for ``artist``: an image's is a patch of its colour map's top colour."""
    from matplotlib.image import AxesImage
    from matplotlib.patches import Patch
    if isinstance(artist, AxesImage):
        return Patch(color=artist.get_cmap()(1.0), alpha=artist.get_alpha(), label=label)
    artist.set_label(label)
    return artist


def wrap(text: str, width: int, delimiter: str = ' ') -> str:
    """``text`` broken into lines of at most ``width`` characters after ``delimiter``s (kept at the lines' ends);
    an item longer than that on a line of its own."""
    lines: list[str] = []
    for item in text.split(delimiter):
        if lines and len(lines[-1]) + len(delimiter) + len(item) <= width:
            lines[-1] += delimiter + item
        else:
            lines.append(item)
    return (delimiter + '\n').join(lines)


def text_and_options(params: Mapping[str, Any], key: str) -> tuple[str, dict]:
    """``params[key]`` as text (a list joined with commas; wrapped at ``{key}_wrap_width`` characters, after
    ``{key}_wrap_delimiter``, a space by default) and the other ``{key}_*`` options."""
    options = prefixed(params, key)
    width, delimiter = options.pop('wrap_width', None), options.pop('wrap_delimiter', ' ')
    text = params[key]
    text = ', '.join(map(str, text)) if isinstance(text, list) else str(text)
    return (wrap(text, width, delimiter) if width else text), options


TICK_PARAMS = {'rotation': 'labelrotation', 'fontsize': 'labelsize', 'color': 'labelcolor'}


def _style_tick_labels(ax: Any, axis: str, options: dict[str, Any]) -> None:
    """Text properties on the tick labels of ``axis`` (rotation, size and colour kept for ticks placed later)."""
    ax.tick_params(axis=axis, **{TICK_PARAMS[key]: options.pop(key) for key in list(options) if key in TICK_PARAMS})
    for label in getattr(ax, f'get_{axis}ticklabels')():
        label.update(options)


def _ticks(ax: Any, params: Mapping[str, Any]) -> None:
    """``xtick_*``/``ytick_*``: ``locations``, ``labels`` (at ``0, 1, ...`` without locations), ``size`` and the
    labels' text properties (``rotation``, ``ha``, ``color``...)."""
    for axis in ('x', 'y'):
        options = prefixed(params, f'{axis}tick')
        locations, labels = options.pop('locations', None), options.pop('labels', None)
        if 'size' in options:
            options['fontsize'] = options.pop('size')
        if locations is not None or labels is not None:
            getattr(ax, f'set_{axis}ticks')(list(range(len(labels)) if locations is None else locations))
        if labels is not None:
            getattr(ax, f'set_{axis}ticklabels')([str(label) for label in labels], **options)
        elif options:
            _style_tick_labels(ax, axis, options)


def annotate_subplot(ax: Any, mode: str, params: Mapping[str, Any], artists: list, labels: list) -> Any:
    """Title, axis labels, ticks, limits, log scale, grid, colour bar (of the first layer) and legend of one
    subplot; returns the colour bar (or ``None``)."""
    params = {**SUBPLOT_DEFAULTS.get(mode, {}), **params}
    for key in ('title', 'xlabel', 'ylabel'):
        if params.get(key) is not None:
            text, options = text_and_options(params, key)
            getattr(ax, f'set_{key}')(text, **options)
    _ticks(ax, params)
    for key in ('xlim', 'ylim'):
        if params.get(key) is not None:
            getattr(ax, f'set_{key}')(params[key])
    if params.get('log'):
        ax.set_yscale('log')
    if params.get('grid') or (params.get('grid') is None and mode not in ('image', 'matrix')):
        ax.grid(alpha=0.3, **prefixed(params, 'grid'))
    colorbar = None
    if params.get('colorbar') and artists and artists[0] is not None:
        colorbar = ax.figure.colorbar(artists[0], ax=ax, **prefixed(params, 'colorbar'))
    handles = [_legend_handle(artist, label) for artist, label in zip(artists, labels)
               if label is not None and artist is not None]
    if mode == 'loss':
        ax.legend(**prefixed(params, 'legend'))
    elif handles:
        ax.legend(handles=handles, **prefixed(params, 'legend'))
    return colorbar
