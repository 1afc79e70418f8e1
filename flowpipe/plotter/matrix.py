"""``draw_matrix``: ``plot``'s ``'matrix'`` mode (batchflow's) — a 2-d array as a heat map (``matshow``: one cell per
value, rows downwards, column numbers on top) with each cell's value written in it.

Parameters (a layer's, already picked): ``cmap`` (``'magma'``), ``vmin``/``vmax``/``vrange`` as in image mode,
``matrix_*`` to ``matshow``; the cell texts: ``label_format`` (a format spec such as ``'.3f'``, or a dict
``{python type: spec}`` matched against each value: by default ``{float: '.2f', int: ''}``), ``label_color``
(``'white'``: on cells darker than middle grey; the opposite colour on lighter ones), ``label_size`` (12),
``label_bbox`` and other ``label_*`` text properties. The colour bar is on by default (``colorbar=False`` drops it).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .layers import batchflow_colormap, prefixed, value_range

__all__ = ['cell_text', 'draw_matrix']

DEFAULT_FORMAT = {float: '.2f', int: ''}


def cell_text(value: Any, label_format: Any) -> str:
    """``value`` written with ``label_format``: a format spec, or ``{type: spec}`` (the last type that matches;
    no match: ``str``)."""
    value = value.item() if isinstance(value, np.generic) else value
    if isinstance(label_format, str):
        return format(value, label_format)
    if isinstance(label_format, Mapping):
        spec = ''
        for kind, kind_spec in label_format.items():
            if isinstance(value, kind):
                spec = kind_spec
        return format(value, spec)
    raise TypeError(f"Expected label_format as a format spec such as '.2f' or a dict {{type: spec}}. Received: "
                    f"{type(label_format).__name__} {label_format!r:.60}.")


def _text_color(cell: tuple, label_color: Any) -> tuple:
    """``label_color`` on a dark cell, its opposite (``1 - r, 1 - g, 1 - b``) on a light one."""
    from matplotlib.colors import to_rgba
    red, green, blue, alpha = to_rgba(label_color)
    if np.mean(cell[:3]) < 0.5:
        return red, green, blue, alpha
    return 1 - red, 1 - green, 1 - blue, alpha


def draw_matrix(ax: Any, data: np.ndarray, params: Mapping[str, Any]) -> Any:
    """``matshow`` of a 2-d array through ``cmap`` with every cell's value written in its centre; returns the
    image (the colour bar refers to it)."""
    data = np.asarray(data)
    if data.ndim != 2:
        raise ValueError(f"Expected a matrix as a 2-d array in mode='matrix'. Received: shape {data.shape}. Draw "
                         f"images of other shapes with mode='image'.")
    vmin, vmax = value_range(data, params)
    cmap = params.get('cmap', 'magma')
    cmap = batchflow_colormap() if isinstance(cmap, str) and cmap == 'batchflow' else cmap
    options = {'cmap': cmap, 'vmin': vmin, 'vmax': vmax, 'alpha': params.get('alpha'), **prefixed(params, 'matrix')}
    image = ax.matshow(data, **options)
    text_options = {'size': 12, 'ha': 'center', 'va': 'center', **prefixed(params, 'label')}
    label_format = text_options.pop('format', DEFAULT_FORMAT)
    label_color = text_options.pop('color', 'white')
    cells = image.to_rgba(data)
    for (row, column), value in np.ndenumerate(data):
        ax.text(column, row, cell_text(value, label_format), color=_text_color(cells[row, column], label_color),
                **text_options)
    return image
