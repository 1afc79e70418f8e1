"""Batch items one by one (``for item in batch``) and loading a batch's items from an in-memory source.

Both are batchflow's API: ``item.features`` reads one item's value of a component and ``item.features = x``
writes it back into the batch; ``batch.load(src=array)`` takes the rows of ``src`` whose numbers are the batch's
item ids (a source aligned with the whole dataset).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np

from flowpipe.data.arrays import as_item_array

__all__ = ['BatchItem', 'load_source', 'raw_entry']


class BatchItem:
    """Item ``position`` of ``batch``: its components as attributes, read and written in place."""
    __slots__ = ('_batch', '_position')

    def __init__(self, batch: Any, position: int):
        object.__setattr__(self, '_batch', batch)
        object.__setattr__(self, '_position', position)

    def _values(self, name: str) -> Any:
        batch = self._batch
        if name not in batch.components:
            raise AttributeError(f"Expected a component of the batch {batch.components!r}. Received: {name!r}")
        values = getattr(batch, name)
        if values is None:
            raise AttributeError(f"Component {name!r} holds no data yet; load or add it first")
        return values

    def __getattr__(self, name: str) -> Any:
        if name.startswith('_'):
            raise AttributeError(name)
        if name in self._batch.components and getattr(self._batch, name) is None:
            return None                 # an empty component's item is None, as the component itself
        return self._values(name)[self._position]

    def __setattr__(self, name: str, value: Any) -> None:
        self._values(name)[self._position] = value

    def __repr__(self) -> str:
        batch = self._batch
        parts = [f"{name}={getattr(batch, name)[self._position]}" for name in batch.components
                 if getattr(batch, name) is not None]
        return f"BatchItem({batch.indices[self._position]}: {', '.join(parts)})"


def raw_entry(raw: Any, position: int) -> Any:
    """Item ``position`` of a batch's unnamed data: an array's row, a pandas object's, a tuple of those."""
    if isinstance(raw, tuple):
        return tuple(raw_entry(values, position) for values in raw)
    return raw.iloc[position] if hasattr(raw, 'iloc') else raw[position]


def load_source(batch: Any, src: Any, dst: str | Sequence[str] | None) -> None:
    """Fill ``batch``'s components ``dst`` (or its declared ones) with the rows of ``src`` at its item ids."""
    if src is None:
        raise ValueError("Expected src: an array, a tuple of arrays or a dict {component: array} aligned with the "
                         "dataset. Received: src=None")
    names = _target_names(batch, src, dst)
    if names is None:
        batch._raw = (tuple(_take(values, batch.indices, f'src[{i}]', raw=True) for i, values in enumerate(src))
                      if isinstance(src, tuple) else _take(src, batch.indices, 'src', raw=True))
        return
    if _is_frame(src):                  # a DataFrame fills components from its columns of the same names
        src = {name: src[name] for name in src.columns}
    if isinstance(src, Mapping):
        missing = [name for name in names if name not in src]
        if missing:
            raise KeyError(f"Expected src to hold {missing!r}. Received keys {list(src)!r}")
        sources = [src[name] for name in names]
    else:
        sources = list(src) if isinstance(src, tuple) else [src]
    if isinstance(src, tuple) and dst is None:
        names = names[:len(sources)]    # batchflow's tuple for the first components; the others stay as they are
    if len(sources) != len(names):
        raise ValueError(f"Expected one source per component {names!r}. Received {len(sources)} sources")
    data = batch._checked({name: _take(values, batch.indices, name) for name, values in zip(names, sources)})
    new = [name for name in names if name not in batch.components]
    batch.__dict__.update(data)
    batch.components = batch.components + tuple(new)


def _target_names(batch: Any, src: Any, dst: Any) -> list[str] | None:
    """The components to fill, or ``None`` for a batch without components taking unnamed data.

    A tuple ``src`` is matched to the class's declared components (as ``Dataset(preloaded=tuple)`` is), and kept
    whole as the unnamed data of a batch without components.
    """
    if dst is not None:
        return [dst] if isinstance(dst, str) else list(dst)
    if isinstance(src, Mapping):
        return list(src)
    if not batch.components:
        return None
    if isinstance(src, tuple):
        return list(type(batch).components or batch.components)
    if len(batch.components) == 1:
        return list(batch.components)
    raise ValueError(f"Expected a tuple or a dict src for the components {batch.components!r}, or dst= naming "
                     f"where one array goes. Received: {type(src).__name__}")


def _is_frame(values: Any) -> bool:
    return hasattr(values, 'loc') and hasattr(values, 'columns')


def _take(values: Any, ids: np.ndarray, name: str, raw: bool = False) -> Any:
    """The entries of ``values`` for item ``ids``: rows of an array, labels of a pandas object (kept a pandas
    object for a batch's unnamed ``raw`` data, as in batchflow), values of a dict keyed by item id."""
    if hasattr(values, 'loc') and hasattr(values, 'to_numpy'):
        return values.loc[ids] if raw else values.loc[ids].to_numpy()
    if isinstance(values, Mapping):
        missing = [item for item in np.asarray(ids).tolist() if item not in values]
        if missing:
            raise KeyError(f"Expected {name} to hold every item id. Received a dict without {missing[:3]!r}")
        return as_item_array([values[item] for item in ids], name=name)
    if np.asarray(ids).dtype.kind not in 'iu':
        raise TypeError(f"Expected integer item ids to take rows of {name}. Received ids such as {ids[:3]!r}; use "
                        "a pandas object indexed by these ids, or preloaded data in the Dataset")
    array = as_item_array(values, name=name)
    if len(ids) and (ids.min() < 0 or ids.max() >= len(array)):
        raise IndexError(f"Expected {name} to hold a row for every item id. Received {len(array)} rows and ids up "
                         f"to {ids.max()}; give the source aligned with the whole dataset")
    return array[ids]
