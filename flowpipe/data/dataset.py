"""``Dataset``: an index, a batch class, optional preloaded data and user attributes (read by ``D``).

The dataset owns the item ids (its ``index``) and the data aligned with the index it was created from; its
splits share that data and their own index only selects ids. ``create_batch`` slices the data to a batch's ids.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from .arrays import as_item_array
from .dataset_checks import check_dataset_arguments
from .index import DatasetIndex

__all__ = ['Dataset']


class Dataset:
    """A collection of items drawn in batches.

    Args:
        index: a ``DatasetIndex`` (or a ``FilesIndex``), a number of items, an array of ids, or a callable
            returning one of those.
        batch_class: the class of batches made by ``create_batch`` (``flowpipe.batch.Batch`` by default).
        preloaded: data held in memory, aligned with ``index``: a dict ``{component: array}`` (or ``{component:
            {item id: value}}``), a tuple matched to ``batch_class.components`` (or a DataFrame, by its columns);
            for a batch class without components, batchflow's unnamed data (an array, a tuple of them or a
            DataFrame) that batches hold as their ``data``.
            Splits share it whole; ``component(name)`` gives a split's own values.
        **attributes: become attributes of the dataset and its splits (``D.num_classes``).

    Attributes:
        train, test, validation: sub-datasets made by ``split`` (``None`` before it).
        cv0, cv1, ...: folds made by ``cv_split``, each with its own ``train`` and ``test``.

    Raises:
        ValueError: a component's length differs from the number of items, or an attribute name is taken.
    """

    def __init__(self, index: Any, batch_class: type | None = None, preloaded: dict | tuple | None = None,
                 **attributes: Any):
        check_dataset_arguments(index, batch_class)
        if batch_class is None:
            from flowpipe.batch import Batch  # batch imports data, so data imports batch only when used
            batch_class = Batch
        self.index = index if isinstance(index, DatasetIndex) else DatasetIndex(index)
        self.batch_class = batch_class
        self.preloaded = _normalize_preloaded(preloaded, batch_class, self.index)
        self._data_index = self.index
        # Batches of ids drawn from this root index need no membership check (see create_batch).
        self._data_root = self.index if self.index._origin is self.index else None
        self._attributes = tuple(attributes)
        self.train = self.test = self.validation = None
        self.n_splits = None
        for name, value in attributes.items():
            if hasattr(type(self), name) or name in self.__dict__:
                raise ValueError(f"Expected dataset attribute names that differ from Dataset's own. "
                                 f"Received: {name}={value!r:.60}; rename it")
            setattr(self, name, value)

    def __repr__(self) -> str:
        components = tuple(self.preloaded) if isinstance(self.preloaded, dict) and self.preloaded else None
        return f"{type(self).__name__}(size={len(self)}, batch_class={self.batch_class.__name__}, " \
               f"components={components})"

    def __len__(self) -> int:
        return len(self.index)

    @property
    def indices(self) -> np.ndarray:
        """The item ids."""
        return self.index.indices

    @property
    def size(self) -> int:
        """Number of items."""
        return len(self.index)

    @property
    def attributes(self) -> dict:
        """The user attributes given at creation, ``{name: value}`` (current values)."""
        return {name: getattr(self, name) for name in self._attributes}

    def component(self, name: str) -> Any:
        """The preloaded values of component ``name`` for this dataset's items, in index order.

        ``preloaded`` is the store a dataset shares with its splits and folds, aligned with the index it was created
        from: ``dataset.train.component('x')`` gives the train items' values only. Items that sit together in the
        store come as a view, other items as a copy.

        Raises:
            KeyError: no preloaded component ``name``.
        """
        names = tuple(self.preloaded) if isinstance(self.preloaded, dict) else ()
        if name not in names:
            note = ('' if names else ' (this dataset has no preloaded data)' if self.preloaded is None
                    else ' (its preloaded data is unnamed: batches hold it as their data)')
            raise KeyError(f"Expected a component name among {names!r}. Received: {name!r}; use one of those names"
                           f"{note}")
        values = self.preloaded[name]
        positions = self._data_index.get_pos(self.indices)
        if len(positions) and np.array_equal(positions, np.arange(positions[0], positions[0] + len(positions))):
            return values[positions[0]:positions[0] + len(positions)]
        return values[positions]

    @staticmethod
    def build_index(index: Any) -> DatasetIndex:
        """The ``DatasetIndex`` a dataset made from ``index`` (a count, ids, a callable or an index) has."""
        return index if isinstance(index, DatasetIndex) else DatasetIndex(index)

    @classmethod
    def from_dataset(cls, dataset: Dataset, index: Any, batch_class: type | None = None) -> Dataset:
        """A dataset of ``dataset``'s items ``index``, sharing its data and attributes (batchflow's constructor).

        Args:
            dataset: the source dataset.
            index: ids of the source's items (a ``DatasetIndex`` or ids).
            batch_class: the new dataset's batch class; the source's by default.
        """
        sub = dataset.create_subset(index)
        if batch_class is not None and batch_class is not sub.batch_class:
            if isinstance(sub.preloaded, dict) and sub.preloaded:
                batch_class.check_component_names(tuple(sub.preloaded))
            sub.batch_class = batch_class
        return sub

    def create_subset(self, index: Any) -> Dataset:
        """A dataset of the given ids (a ``DatasetIndex`` or ids) sharing data, batch class and attributes.

        Raises:
            IndexError: some ids are not items of this dataset.
        """
        root = self.index._origin is self.index
        if isinstance(index, DatasetIndex) and root and index._origin is self.index:
            sub_index = index  # drawn from this very index: no check needed
        else:
            try:
                checked = self.index.create_subset(index.indices if isinstance(index, DatasetIndex) else index)
            except ValueError as error:
                raise IndexError(f"Expected ids of this dataset's items to make a subset. Received ids it does "
                                 f"not hold: {error}") from None
            sub_index = index if isinstance(index, DatasetIndex) else checked
        sub = object.__new__(type(self))
        sub.__dict__.update(self.__dict__)
        sub.index = sub_index
        sub.train = sub.test = sub.validation = None
        sub.n_splits = None
        for name in [name for name in sub.__dict__ if _is_fold(name)]:
            del sub.__dict__[name]
        return sub

    def cv_split(self, method: str = 'kfold', n_splits: int = 5, shuffle: Any = False) -> None:
        """Make ``n_splits`` cross-validation folds: ``cv0``, ``cv1``... each with ``train`` and ``test``.

        The fold ``i`` tests on the ``i``-th of ``n_splits`` contiguous parts of the (shuffled) items and trains on
        the others; ``train.cv<i>`` and ``test.cv<i>`` are the same datasets as ``cv<i>.train`` and
        ``cv<i>.test``. A new ``cv_split`` replaces the folds of the previous one.
        """
        from .folds import kfold_parts
        if method != 'kfold':
            raise ValueError(f"Expected method='kfold', the one cross-validation split. Received: method={method!r}")
        parts = kfold_parts(self.index.shuffle(shuffle), n_splits)
        for holder in (self, self.train, self.test):
            for name in [name for name in vars(holder) if _is_fold(name)] if holder is not None else ():
                delattr(holder, name)
        self.train, self.test, self.n_splits = self.create_subset(self.index), self.create_subset(self.index), n_splits
        self.train.n_splits = self.test.n_splits = n_splits
        for fold, test_positions in enumerate(parts):
            train_positions = np.sort(np.concatenate([part for other, part in enumerate(parts) if other != fold]))
            cv = self.create_subset(self.index)
            cv.train = self.create_subset(self.index.subset(train_positions))
            cv.test = self.create_subset(self.index.subset(np.sort(test_positions)))
            setattr(self, f'cv{fold}', cv)
            setattr(self.train, f'cv{fold}', cv.train)
            setattr(self.test, f'cv{fold}', cv.test)

    def CV(self, fold: Any) -> Any:  # noqa: N802 - batchflow's name
        """An expression for the fold ``fold`` (an expression such as ``C('fold')``): ``F(dataset.cv)(fold)``.

        A pipeline binds one dataset when it is made, so bind a fold as ``template << dataset.cv(k).train``.
        """
        from flowpipe.expr import F
        return F(self.cv)(fold)

    def cv(self, fold: int) -> Dataset:
        """The cross-validation fold ``fold`` made by ``cv_split`` (``cv(0)`` is ``cv0``)."""
        if self.n_splits is None or not 0 <= fold < self.n_splits:
            raise ValueError(f"Expected a fold in 0..{(self.n_splits or 0) - 1} made by cv_split. Received: "
                             f"fold={fold!r}{'' if self.n_splits else '; call cv_split(n_splits=...) first'}")
        return getattr(self, f'cv{fold}')

    def split(self, shares: float | Sequence[float] | None = None, shuffle: bool | int = False, *,
              train: float | None = None, test: float | None = None, validation: float | None = None) -> None:
        """Make ``train``, ``test`` and ``validation`` sub-datasets (see ``DatasetIndex.split``): ``split(0.8)``
        makes ``train`` and ``test``, ``split(train=0.8, validation=0.2)`` ``train`` and ``validation``."""
        self.index.split(shares, shuffle, train=train, test=test, validation=validation)
        for part in ('train', 'test', 'validation'):
            sub_index = getattr(self.index, part)
            setattr(self, part, None if sub_index is None else self.create_subset(sub_index))

    def batch_index(self, index: Any, pos: bool = False) -> DatasetIndex:
        """The ``DatasetIndex`` of the items ``index``: a ``DatasetIndex`` or ids, positions with ``pos=True``."""
        if pos:
            return self.index.subset(index.indices if isinstance(index, DatasetIndex) else index)
        return index if isinstance(index, DatasetIndex) else self.index.create_subset(index)

    def create_batch(self, index: Any, pos: bool = False) -> Any:
        """A batch of the items ``index`` (a ``DatasetIndex`` or ids; positions with ``pos=True``) with the preloaded
        data sliced to them."""
        index = self.batch_index(index, pos)
        data = None
        if self.preloaded is not None:
            trusted = self._data_root is not None and index._origin is self._data_root
            positions = self._data_index.get_pos(index.indices, check=not trusted)
            if not isinstance(self.preloaded, dict):        # unnamed data: the batch's ``data``
                batch = self.batch_class(index, dataset=self, check=False)
                batch._raw = _rows(self.preloaded, positions)
                return batch
            data = {name: values[positions] for name, values in self.preloaded.items()}
        return self.batch_class(index, data=data, dataset=self, check=False)

    def n_batches(self, batch_size: int, n_iters: int | None = None, n_epochs: int | None = None,
                  drop_last: bool = False, whole_epochs: bool = False) -> int | None:
        """The number of batches ``gen_batch`` yields, ``None`` when infinite."""
        return self.index.n_batches(batch_size, n_iters, n_epochs, drop_last, whole_epochs)

    def gen_batch(self, batch_size: int, shuffle: bool | int = False, n_iters: int | None = None,
                  n_epochs: int | None = None, drop_last: bool = False, seed: Any = None,
                  whole_epochs: bool = False) -> Iterator[Any]:
        """Yield batches directly, without a pipeline (arguments as in ``DatasetIndex.gen_batch``)."""
        indices = self.index.gen_batch(batch_size, shuffle, n_iters, n_epochs, drop_last, seed, whole_epochs)
        return (self.create_batch(index) for index in indices)

    def next_batch(self, batch_size: int, shuffle: bool | int = False, n_iters: int | None = None,
                   n_epochs: int | None = None, drop_last: bool = False, seed: Any = None,
                   whole_epochs: bool = False) -> Any:
        """The next batch of the iteration kept in the index (see ``DatasetIndex.next_batch``)."""
        return self.create_batch(self.index.next_batch(batch_size, shuffle, n_iters, n_epochs, drop_last, seed,
                                                       whole_epochs))

    def reset(self, what: str = 'iter') -> None:
        """Restart ``next_batch`` from the beginning (``what='iter'``, the only state a dataset has)."""
        self.index.reset(what)

    def reset_iter(self) -> None:
        """Restart ``next_batch`` from the beginning (same as ``reset('iter')``)."""
        self.index.reset('iter')

    def pipeline(self, config: Any = None) -> Any:
        """A new ``Pipeline`` bound to this dataset."""
        from flowpipe.pipeline import Pipeline  # the pipeline package depends on data, not the other way round
        return Pipeline(dataset=self, config=config)

    @property
    def p(self) -> Any:
        """A new ``Pipeline`` bound to this dataset (same as ``pipeline()``)."""
        return self.pipeline()


def _is_fold(name: str) -> bool:
    return name.startswith('cv') and name[2:].isdigit()


def _rows(values: Any, positions: np.ndarray) -> Any:
    if isinstance(values, tuple):
        return tuple(_rows(item, positions) for item in values)
    return values.iloc[positions] if hasattr(values, 'iloc') else values[positions]


def _unnamed(preloaded: Any, size: int) -> Any:
    """batchflow's unnamed data of a dataset whose batches declare no components, checked for its length."""
    values = preloaded if isinstance(preloaded, tuple) else (preloaded,)
    values = [item if hasattr(item, 'iloc') else as_item_array(item, name='preloaded') for item in values]
    lengths = {len(item) for item in values}
    if lengths != {size}:
        raise ValueError(f"Expected preloaded data with one entry per item ({size}). Received lengths "
                         f"{sorted(lengths)}; give the data aligned with the index")
    return tuple(values) if isinstance(preloaded, tuple) else values[0]


def _normalize_preloaded(preloaded: Any, batch_class: type, index: DatasetIndex) -> Any:
    size = len(index)
    if preloaded is None:
        return None
    if not getattr(batch_class, 'components', None) and not isinstance(preloaded, dict):
        return _unnamed(preloaded, size)
    if hasattr(preloaded, 'iloc') and hasattr(preloaded, 'columns'):
        preloaded = {name: preloaded[name].to_numpy() for name in preloaded.columns}
    if isinstance(preloaded, tuple):
        names = getattr(batch_class, 'components', None)
        if not names or len(names) < len(preloaded):
            raise ValueError(f"Expected a tuple of at most {len(names) if names else 'named'} arrays matching "
                             f"{batch_class.__name__}.components={names!r}. Received a tuple of {len(preloaded)}; "
                             "pass a dict {component: array} instead")
        preloaded = dict(zip(names, preloaded))     # as batchflow: the first components; the others are None
    if not isinstance(preloaded, dict):
        raise TypeError("Expected preloaded to be a dict {component: array} or a tuple of arrays. "
                        f"Received: {type(preloaded).__name__}")
    batch_class.check_component_names(tuple(preloaded))
    result = {}
    for name, values in preloaded.items():
        if values is None:
            continue
        if isinstance(values, dict):        # batchflow's {item id: value}: in the index's order
            missing = [item for item in index.indices.tolist() if item not in values]
            if missing:
                raise KeyError(f"Expected preloaded[{name!r}] to hold every item id. Received a dict without "
                               f"{missing[:3]!r}")
            values = [values[item] for item in index.indices.tolist()]
        values = as_item_array(values, name=f"preloaded[{name!r}]")
        if len(values) != size:
            raise ValueError(f"Expected component {name!r} to have one entry per item ({size}). Received "
                             f"{len(values)} entries; give every component the index's length")
        result[name] = values
    return result

