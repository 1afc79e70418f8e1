"""Named views of items in a data source (batchflow's ``components`` module): ``create_item_class(components,
source, indices)`` gives an object whose attributes are the components' values at those items.

A source is a tuple or list of arrays (matched to ``components`` in order), a dict of arrays (by name), a pandas
``DataFrame`` (its columns, items by the frame's index), a dict of ``{item id: value}`` dicts, or another view
(whose source is then used). Items are ids of the source (positions for arrays, index labels for a frame, keys for
a dict of dicts); a view of a view takes ids of the same source. Reading a component returns its values at the
view's items (a copy for several items, the value for one id); assigning writes them into the source.
Without component names, ``view[key]`` is the component at that key (a column name, a position, a dict key), and
a plain array source is indexed directly: ``create_item_class(None, array, ids)`` is ``array[ids]``.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = ['BaseComponents', 'create_item_class']


def _is_frame(value: Any) -> bool:
    return type(value).__name__ in ('DataFrame', 'Series') and hasattr(value, 'loc')


def _column(source: Any, key: Any, components: tuple[str, ...] | None) -> Any:
    """A whole component of ``source``: ``key`` is a name (matched by position in a tuple source) or a key."""
    if isinstance(source, (tuple, list)):
        position = components.index(key) if components is not None and isinstance(key, str) else key
        return source[position]
    try:
        return source[key]
    except (KeyError, IndexError):
        raise AttributeError(f"Expected a component of the source. Received: {key!r}, which the source does not "
                             f"have. Its components: {list(components or [])}.") from None


def _take(column: Any, ids: Any) -> Any:
    """``column``'s values at ``ids`` (all of it for ``None``): by label in a frame, by key in a dict, else by
    position."""
    if ids is None:
        return column
    several = isinstance(ids, (list, np.ndarray))
    if _is_frame(column):
        values = column.loc[list(ids) if several else ids]
        return values.to_numpy() if several else values
    if isinstance(column, dict):
        return np.array([column[key] for key in ids]) if several else column[ids]
    return np.asarray(column)[ids]


def _put(column: Any, ids: Any, value: Any) -> None:
    if ids is None:
        ids = column.index if _is_frame(column) else list(column) if isinstance(column, dict) else slice(None)
    if _is_frame(column):
        column.loc[list(ids) if isinstance(ids, (list, np.ndarray)) else ids] = value
    elif isinstance(column, dict):
        keys = list(ids) if isinstance(ids, (list, np.ndarray)) else [ids]
        values = np.broadcast_to(np.asarray(value, dtype=object), (len(keys),))
        column.update(zip(keys, values))
    else:
        column[ids] = value


class BaseComponents:
    """A view of items ``indices`` of ``source``, with the component names of its class as attributes."""

    components: tuple[str, ...] | None = None

    def __init__(self, source: Any, indices: Any = None, crop: bool = False) -> None:
        if isinstance(source, BaseComponents):
            source = source.source
        if crop and indices is not None:
            # a copy of the items' values, keyed by item id: the view no longer follows the source
            ids = list(indices) if isinstance(indices, (list, np.ndarray)) else [indices]
            names = self.components if self.components is not None else self._keys(source)
            source = {name: dict(zip(ids, _take(_column(source, name, self.components), ids))) for name in names}
        object.__setattr__(self, 'source', source)
        object.__setattr__(self, 'indices', indices)

    @staticmethod
    def _keys(source: Any) -> list:
        return list(range(len(source))) if isinstance(source, (tuple, list)) else list(source.keys())

    def __getattr__(self, name: str) -> Any:
        components = type(self).components
        if name.startswith('__') or components is None or name not in components:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}. Its components: "
                                 f"{list(components or [])}.")
        return _take(_column(self.source, name, components), self.indices)

    def __setattr__(self, name: str, value: Any) -> None:
        components = type(self).components
        if components is None or name not in components:
            raise AttributeError(f"Expected one of the components {list(components or [])}. Received: {name!r}.")
        _put(_column(self.source, name, components), self.indices, value)

    def __getitem__(self, key: Any) -> Any:
        """Without component names, the component at ``key``; with them, a view of the item with id ``key``."""
        if type(self).components is None:
            return _take(_column(self.source, key, None), self.indices)
        return type(self)(self.source, key)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} components={list(type(self).components or [])} items={self.indices!r}>"


@lru_cache(maxsize=None)
def _item_class(components: tuple[str, ...] | None) -> type:
    name = 'Components' if components is None else 'Components_' + '_'.join(components)
    return type(name, (BaseComponents,), {'components': components})


def create_item_class(components: str | Sequence[str] | None, source: Any, indices: Any = None,
                      crop: bool = False) -> Any:
    """A view of the items ``indices`` (all for ``None``) of ``source``, with ``components`` as attributes.

    Args:
        components: the component names (matched in order to a tuple source), or ``None`` to reach the
            components by key (``view['labels']``, ``view[1]``).
        source: arrays (a tuple, list or dict of them), a pandas ``DataFrame``, a dict of ``{id: value}`` dicts,
            or another view; ``None`` components and a plain array give the array at ``indices`` itself.
        indices: item ids: one (its values come back as they are) or a list/array of them.
        crop: keep a copy of the items' values instead of reading the source on every access.
    """
    if isinstance(components, str):
        components = (components,)
    components = None if components is None else tuple(components)
    if components is None and isinstance(source, np.ndarray):
        return source if indices is None else source[indices]
    if not isinstance(source, (tuple, list, dict, BaseComponents)) and not _is_frame(source):
        raise TypeError(f"Expected a source as a tuple, list or dict of arrays, a DataFrame or a view. Received: "
                        f"{type(source).__name__}.")
    return _item_class(components)(source, indices, crop)
