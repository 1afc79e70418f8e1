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

_RESERVED = frozenset({'index', 'dataset', 'components', '_seed', '_random', '_raw'})


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
        preloaded: batchflow's way to give data: the items of ``preloaded`` (aligned with the dataset, indexed by
            item id) are loaded as by ``load(src=preloaded)``.

    Attributes:
        components: names of the batch's components (the class attribute declares the usual ones).
        seed: the batch's ``numpy.random.SeedSequence`` (set by the runner; fresh entropy by default).
        random: a ``numpy.random.Generator`` made from ``seed`` on first use (set by the runner or by hand).

    Raises:
        ValueError: a component's length differs from the batch size, or its name is taken by the class.
    """
    components: tuple[str, ...] | None = None
    # data loaded into a batch without components (batchflow's unnamed data): ``data`` and iteration show it
    _raw: Any = None

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get('components') is not None:
            cls.components = tuple(cls.components)
            cls.check_component_names(cls.components)

    def __init__(self, index: Any, data: dict | tuple | None = None, dataset: Any = None, *, check: bool = True,
                 preloaded: Any = None):
        self.index = index if isinstance(index, DatasetIndex) else DatasetIndex(index)
        self.dataset = dataset
        self._seed = None
        self._random = None
        self._set_data(data, check)
        if preloaded is not None:
            self.load(src=preloaded)

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
            try:
                values = as_item_array(values, name=f"component {name!r}")
            except TypeError as error:
                raise TypeError(f"{error}. A value for the whole batch is an attribute: update(B({name!r}), value) "
                                "(see docs/porting.md#components-have-one-entry-per-item)") from None
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

    def __iter__(self) -> Iterator[Any]:
        """The items: views whose attributes are the item's components (assigning one writes to the batch)."""
        if self._raw is not None:
            return iter(self._raw)
        from .items import BatchItem
        return (BatchItem(self, position) for position in range(len(self)))

    def __getitem__(self, item_id: Any) -> Any:
        """The item of id ``item_id`` (batchflow's ``batch[id]``): a view as ``for item in batch`` gives, or the
        entry of the unnamed data of a batch loaded without components."""
        from .items import BatchItem, raw_entry
        position = int(self.index.get_pos(item_id))
        return raw_entry(self._raw, position) if self._raw is not None else BatchItem(self, position)

    @property
    def size(self) -> int:
        """Number of items in the batch."""
        return len(self.index)

    @property
    def indices(self) -> np.ndarray:
        """The item ids of the batch."""
        return self.index.indices

    @property
    def data(self) -> Any:
        """A read-only ``{name: values}`` view of the components (the data itself for a batch loaded without)."""
        return self._raw if self._raw is not None else ComponentsView(self)

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
    def do_nothing(self, *args: Any, **kwargs: Any) -> Batch:
        """An action that does nothing (its arguments are still evaluated)."""
        return self

    @action
    def load(self, src: Any = None, fmt: str | None = None, dst: str | Sequence[str] | None = None) -> Batch:
        """Take the batch's items from ``src``, a source aligned with the dataset and indexed by item id.

        Args:
            src: an array (or a pandas object) with one entry per dataset item, a tuple of them (matched to
                ``dst`` or to the declared components), or a dict ``{component: values}``.
            fmt: ``None`` (in-memory data); image files are read by ``ImagesBatch.load(fmt='image')``.
            dst: the component(s) to fill; new names become components. A batch without components keeps an
                array ``src`` as its unnamed ``data``, which iteration yields row by row.
        """
        if fmt is not None:
            raise ValueError(f"Expected fmt=None: {type(self).__name__} loads in-memory data. Received: fmt={fmt!r}; "
                             "image files load with ImagesBatch.load(fmt='image')")
        from .items import load_source
        load_source(self, src, dst)
        return self

    @action
    def to_device(self, device: Any = 'cpu', src: str | Sequence[str] | None = None,
                  pin_memory: bool | str = 'auto') -> Batch:
        """Make components torch tensors on ``device`` (a GPU: copied ahead of the model step under prefetch).

        Args:
            device: one device spec, as a model's ``device`` (``'GPU:0'``, ``'cuda:1'``, ``'cpu'``): the model's
                primary device, where its steps take their inputs without another copy.
            src: a component or a list of them; ``None``: every component that holds one numeric array or tensor.
            pin_memory: towards a GPU, copy through pinned host memory with non-blocking copies; ``'auto'``:
                when ``device`` is a GPU.

        See ``flowpipe.batch.device``: the copies run on a side stream of the calling (prefetch) thread and are
        complete when the action returns; towards the CPU, arrays become tensors sharing their memory.
        """
        from .device import device_of_spec, movable, to_device
        target = device_of_spec(device)
        names = ([src] if isinstance(src, str) else list(src) if src is not None
                 else [name for name in self.components if movable(getattr(self, name))])
        bad = {name: type(getattr(self, name, None)).__name__ for name in names
               if name not in self.components or not movable(getattr(self, name))}
        if bad:
            raise ValueError(f"Expected components holding one numeric array or tensor. Received: {bad} (name: "
                             f"type; object arrays of items of different shapes cannot move). Stack them first, "
                             f"e.g. with to_array().")
        if pin_memory not in (True, False, 'auto'):
            raise ValueError(f"Expected pin_memory as True, False or 'auto'. Received: pin_memory={pin_memory!r}.")
        pin = target.type == 'cuda' if pin_memory == 'auto' else pin_memory and target.type == 'cuda'
        for name, tensor in to_device({name: getattr(self, name) for name in names}, target, pin).items():
            setattr(self, name, tensor)
        return self

    @action
    def apply_parallel(self, func: Callable, src: str | Sequence[str] = 'images',
                       dst: str | Sequence[str] | None = None, p: float | None = None, *args: Any,
                       workers: int | None = None, target: str | None = None, requires_rng: bool = False,
                       init: Any = None, post: Any = None, **kwargs: Any) -> Batch:
        """Map ``func(item, *args, **kwargs)`` over the items of ``src`` and write the results to ``dst``.

        Args:
            func: called once per item. When it takes a keyword ``rng`` (or ``requires_rng=True``), it gets a
                per-item ``numpy.random.Generator`` spawned from the batch's seed.
            src: a component name; a list of names, each transformed on its own (the same items and random
                draws for all, e.g. images and their masks); or a tuple of names, giving ``func`` one tuple of
                their values per item.
            dst: where results go (``src`` by default; for a list ``src``, a list as long); several names for
                one source take a tuple of results per item.
            p: the probability to transform each item (drawn from the batch's generator); the others are copied.
            *args: passed to ``func``; a ``PerItem`` value (from ``P(...)``) gives item ``i`` its entry.
            **kwargs: passed to ``func`` likewise.
            workers: run ``func`` in a pool of that many threads (for heavy, GIL-releasing functions).
            target: batchflow's engine: ``'for'`` (the default here) or ``'threads'`` (a pool of one thread per
                CPU core, unless ``workers`` is given).
            requires_rng: pass ``rng=`` even when ``func``'s signature does not show it.
            init, post: batchflow's custom item makers and assemblers, which flowpipe does not have: ``None``.

        Results of one shape stack into an array, others into a 1-D object array.
        """
        from .parallel import apply_to_items, workers_for
        if init not in (None, 'data') or post is not None:
            raise ValueError("Expected init=None and post=None: flowpipe's apply_parallel takes items from src and "
                             f"stacks the results. Received: init={init!r}, post={post!r}; make the items a "
                             "component first (see docs/porting.md, Other differences)")
        apply_to_items(self, func, src, dst, p, args, kwargs, workers_for(target, workers), requires_rng)
        return self

    def assemble(self, all_results: Sequence[Any], dst: str | Sequence[str] | None = None,
                 src: str | Sequence[str] | None = None, dst_default: str | Sequence[str] | None = None) -> Batch:
        """Put one result per item into components (batchflow's ``_assemble``); returns the batch.

        The components are ``dst``, else ``src``, else ``dst_default`` (``'components'``: all of the batch's); for
        several, each result holds one value per component. A failed item (an exception among the results) raises
        ``RuntimeError``.
        """
        from .parallel import assemble
        names = next((names for names in (dst, src, dst_default) if names is not None), None)
        assemble(self, all_results, self.components if names == 'components' else names)
        return self

    _assemble = assemble

    def subset(self, positions: Any) -> Batch:
        """A new batch of the items at ``positions`` (same class, dataset and components)."""
        positions = np.asarray(positions, dtype=np.intp) if not isinstance(positions, slice) else positions
        # as_item_array: a component assigned as a plain list still slices by an array of positions.
        data = {name: None if values is None else as_item_array(values, name)[positions]
                for name, values in ((name, getattr(self, name)) for name in self.components)}
        index = DatasetIndex._from_ids(self.index.indices[positions], parent=self.index)
        batch = type(self)(index, data=data, dataset=self.dataset, check=False)
        batch.components = self.components
        if self._raw is not None:
            batch._raw = as_item_array(self._raw, 'data')[positions]
        return batch

    @classmethod
    def merge(cls, batches: Sequence[Batch], batch_size: int | None = None, components: Any = None,
              batch_class: type | None = None) -> tuple[Batch, Batch | None]:
        """Concatenate ``batches``; with ``batch_size``, the first ``batch_size`` items and the rest (or ``None``).

        ``components`` (a name or a list) keeps only those components; ``batch_class`` makes batches of that
        class instead of the first batch's.

        Raises:
            ValueError: no batches, batches with different components, or ``batch_size < 1``.
        """
        from .merge import merge_batches
        return merge_batches(batches, batch_size, components, batch_class)
