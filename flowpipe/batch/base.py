"""``Batch``: the items of one batch as named components, and the ``@action`` marker for pipeline methods.

Components live as plain instance attributes (``batch.images``), so reading and assigning them costs what any
attribute does; ``components`` lists their names. A class declares its usual components in the class attribute
``components``; data given as a dict may add more.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from flowpipe.data.arrays import as_item_array
from flowpipe.data.index import DatasetIndex

__all__ = ['ActionSpec', 'Batch', 'action']

_RESERVED = frozenset({'index', 'dataset', 'components', '_seed', '_random'})


@dataclass(frozen=True)
class ActionSpec:
    """What ``@action`` records on a method.

    Attributes:
        use_lock: run the action for one batch at a time, in batch order (see the pipeline's ordered locks).
    """
    use_lock: bool = False


def action(method: Callable | None = None, *, use_lock: bool = False) -> Callable:
    """Mark a batch method as a pipeline action: ``@action`` or ``@action(use_lock=True)``.

    The method gets an ``action`` attribute holding an ``ActionSpec``; nothing else changes.
    """
    if not isinstance(use_lock, bool):
        raise TypeError(f"Expected use_lock to be True or False. Received: use_lock={use_lock!r}")
    if method is None:
        return lambda func: action(func, use_lock=use_lock)
    if not callable(method):
        raise TypeError(f"Expected @action on a method. Received: {method!r}")
    method.action = ActionSpec(use_lock=use_lock)
    return method


class ComponentsView(Mapping):
    """A live, read-only ``{name: values}`` view of a batch's components."""

    def __init__(self, batch: Batch):
        self._batch = batch

    def __getitem__(self, name: str) -> Any:
        if name not in self._batch.components:
            raise KeyError(f"Expected one of the components {self._batch.components!r}. Received: {name!r}")
        return getattr(self._batch, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._batch.components)

    def __len__(self) -> int:
        return len(self._batch.components)

    def __repr__(self) -> str:
        return f"ComponentsView({self._batch.components!r})"


class Batch:
    """The items of one batch.

    Args:
        index: the batch's ``DatasetIndex`` (or ids, or a number of items).
        data: components as a dict ``{name: values}`` or a tuple matched to ``components``; declared components
            missing from it are ``None``.
        dataset: the dataset the batch comes from (``None`` for a free-standing batch).
        check: convert sequences to arrays and verify every component has one entry per item. ``Dataset``
            passes ``False``: its data is checked once, at creation.

    Attributes:
        components: names of the batch's components (the class attribute declares the usual ones).
        seed: the batch's ``numpy.random.SeedSequence`` (set by the runner; fresh entropy by default).
        random: a ``numpy.random.Generator`` made from ``seed`` on first use (set by the runner or by hand).

    Raises:
        ValueError: a component's length differs from the batch size, or its name is taken by the class.
    """
    components: tuple[str, ...] | None = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get('components') is not None:
            cls.components = tuple(cls.components)
            cls.check_component_names(cls.components)

    def __init__(self, index: Any, data: dict | tuple | None = None, dataset: Any = None, *, check: bool = True):
        self.index = index if isinstance(index, DatasetIndex) else DatasetIndex(index)
        self.dataset = dataset
        self._seed = None
        self._random = None
        self._set_data(data, check)

    def _set_data(self, data: dict | tuple | None, check: bool) -> None:
        declared = type(self).components or ()
        if data is None:
            data = {}
        elif isinstance(data, tuple):
            if len(data) != len(declared):
                raise ValueError(f"Expected a tuple of {len(declared)} components {declared!r}. Received a tuple "
                                 f"of {len(data)}; pass a dict {{name: values}} for other components")
            data = dict(zip(declared, data))
        elif not isinstance(data, dict):
            raise TypeError(f"Expected data to be a dict or a tuple. Received: {type(data).__name__}")
        if check:
            data = self._checked(data)
        attributes = self.__dict__
        for name in declared:
            attributes[name] = None
        attributes.update(data)
        self.components = declared if data.keys() <= set(declared) else declared + tuple(
            name for name in data if name not in declared)

    def _checked(self, data: dict) -> dict:
        self.check_component_names(tuple(data))
        checked = {}
        for name, values in data.items():
            values = as_item_array(values, name=f"component {name!r}")
            if values is not None and len(values) != len(self.index):
                raise ValueError(f"Expected component {name!r} to have {len(self.index)} items, as the batch "
                                 f"index. Received {len(values)}; give every component the batch's length")
            checked[name] = values
        return checked

    @classmethod
    def check_component_names(cls, names: Sequence[str]) -> None:
        """Raise ``ValueError`` for component names that would hide the class's attributes or methods."""
        for name in names:
            if not isinstance(name, str) or not name.isidentifier():
                raise ValueError(f"Expected component names to be identifiers. Received: {name!r}")
            if name in _RESERVED or (hasattr(Batch, name) or callable(getattr(cls, name, None))
                                     or isinstance(getattr(cls, name, None), property)):
                raise ValueError(f"Expected a component name unused by {cls.__name__}. Received: {name!r}, "
                                 "which is an attribute or method of the class; rename the component")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={len(self)}, components={self.components!r})"

    def __len__(self) -> int:
        return len(self.index)

    @property
    def size(self) -> int:
        """Number of items in the batch."""
        return len(self.index)

    @property
    def indices(self) -> np.ndarray:
        """The item ids of the batch."""
        return self.index.indices

    @property
    def data(self) -> ComponentsView:
        """A read-only ``{name: values}`` view of the components."""
        return ComponentsView(self)

    @property
    def seed(self) -> np.random.SeedSequence:
        """The batch's ``SeedSequence`` (fresh entropy unless the runner or the user set one)."""
        if self._seed is None:
            self._seed = np.random.SeedSequence()
        return self._seed

    @seed.setter
    def seed(self, value: Any) -> None:
        if value is not None and not isinstance(value, np.random.SeedSequence):
            value = np.random.SeedSequence(value)
        self._seed = value
        self._random = None

    @property
    def random(self) -> np.random.Generator:
        """The batch's generator, made from ``seed`` on first use (a Generator costs ~15 µs to create)."""
        if self._random is None:
            self._random = np.random.default_rng(self.seed)
        return self._random

    @random.setter
    def random(self, value: np.random.Generator | None) -> None:
        self._random = value

    @classmethod
    def action_names(cls) -> tuple[str, ...]:
        """Sorted names of the class's actions, inherited ones included."""
        cached = cls.__dict__.get('_action_names')
        if cached is None:
            names, seen = [], set()
            for klass in cls.__mro__:
                for name, value in vars(klass).items():
                    if name not in seen:
                        seen.add(name)
                        if isinstance(getattr(value, 'action', None), ActionSpec):
                            names.append(name)
            cached = tuple(sorted(names))
            cls._action_names = cached
        return cached

    @classmethod
    def action_spec(cls, name: str) -> ActionSpec | None:
        """The ``ActionSpec`` of action ``name``, or ``None`` when ``name`` is not an action."""
        spec = getattr(getattr(cls, name, None), 'action', None)
        return spec if isinstance(spec, ActionSpec) else None

    @action
    def add_components(self, names: str | Sequence[str], init: Any = None) -> Batch:
        """Add components: ``names`` a name or a list; ``init`` their values (a list of them for several)."""
        names = [names] if isinstance(names, str) else list(names)
        if isinstance(init, (list, tuple)) and len(names) > 1:
            values = list(init)
        else:
            values = [init] * len(names) if init is None else [init]
        if len(values) != len(names):
            raise ValueError(f"Expected one init value per component {names!r}. Received {len(values)} values")
        taken = [name for name in names if name in self.components]
        if taken:
            raise ValueError(f"Expected new component names. Received existing {taken!r}; "
                             "assign batch.<name> = values to replace a component")
        data = self._checked(dict(zip(names, values)))
        self.__dict__.update(data)
        self.components = self.components + tuple(names)
        return self

    @action
    def apply_parallel(self, func: Callable, src: str | Sequence[str] = 'images',
                       dst: str | Sequence[str] | None = None, p: float | None = None, *args: Any, workers: int | None = None, **kwargs: Any) -> Batch:
        """Map ``func(item, *args, **kwargs)`` over the items of ``src`` and write the results to ``dst``.

        Args:
            func: called once per item; with several ``src`` names it gets one item of each. When it takes a
                keyword ``rng``, it gets a per-item ``numpy.random.Generator`` spawned from the batch's seed.
            src: a component name or a list of them.
            dst: where results go (``src`` by default); a list of names takes a tuple of results per item.
            p: the probability to transform each item (drawn from the batch's generator); the others are copied.
            *args, **kwargs: passed to ``func``; a ``PerItem`` value (from ``P(...)``) gives item ``i`` its entry.
            workers: run ``func`` in a pool of that many threads (for heavy, GIL-releasing functions).

        Results of one shape stack into an array, others into a 1-D object array.
        """
        from .parallel import apply_to_items
        apply_to_items(self, func, src, dst, p, args, kwargs, workers)
        return self

    def subset(self, positions: Any) -> Batch:
        """A new batch of the items at ``positions`` (same class, dataset and components)."""
        positions = np.asarray(positions, dtype=np.intp) if not isinstance(positions, slice) else positions
        # as_item_array: a component assigned as a plain list still slices by an array of positions.
        data = {name: None if values is None else as_item_array(values, name)[positions]
                for name, values in ((name, getattr(self, name)) for name in self.components)}
        index = DatasetIndex._from_ids(self.index.indices[positions], parent=self.index)
        batch = type(self)(index, data=data, dataset=self.dataset, check=False)
        batch.components = self.components
        return batch

    @classmethod
    def merge(cls, batches: Sequence[Batch], batch_size: int | None = None) -> tuple[Batch, Batch | None]:
        """Concatenate ``batches``; with ``batch_size``, the first ``batch_size`` items and the rest (or ``None``).

        Raises:
            ValueError: no batches, batches with different components, or ``batch_size < 1``.
        """
        from .merge import merge_batches
        return merge_batches(batches, batch_size)
