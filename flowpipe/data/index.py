"""``DatasetIndex``: the item ids of a dataset, its splits and the batches drawn from it.

An index is an ordered, 1-D array of unique item ids (ints, strings...). A *position* is a place in that array;
an *id* is what is stored there. Sub-indices (splits, batches) keep the parent's ids, so a dataset maps a
batch's ids back to positions in its preloaded data.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .sampling import PositionCursor, check_batch_args, gen_positions, n_batches, shuffle_generator

__all__ = ['DatasetIndex']


class DatasetIndex:
    """An ordered collection of unique item ids.

    Args:
        index: the number of items (ids ``0..n-1``), an array-like of ids, another ``DatasetIndex``, or a
            callable returning one of those.

    Attributes:
        train, test, validation: sub-indices made by ``split`` (``None`` before it, or for a zero share).
    """

    def __init__(self, index: int | Sequence | np.ndarray | Callable[[], Any] | DatasetIndex):
        if callable(index) and not isinstance(index, DatasetIndex):
            index = index()
        self._setup(_as_ids(index))
        _check_unique(self._indices)

    @classmethod
    def _from_ids(cls, ids: np.ndarray, parent: DatasetIndex | None = None) -> DatasetIndex:
        """A sub-index over already validated ids, without checks (batches are made this way)."""
        sub = cls.__new__(cls)
        sub._setup(ids)
        if parent is not None:
            sub._origin = parent._origin
            sub._share_from(parent)
        return sub

    def _setup(self, ids: np.ndarray) -> None:
        self._indices = ids
        # The validated index every id here comes from: ids of indices with one origin need no check.
        self._origin = self
        self._is_range = None
        self._sorter = None
        self._iter = None
        self._iter_key = None
        self._iter_count = 0
        self.train = self.test = self.validation = None

    def _share_from(self, parent: DatasetIndex) -> None:
        """Copy what sub-indices share with their parent (subclasses add their own state)."""

    @property
    def indices(self) -> np.ndarray:
        """The item ids, a 1-D numpy array."""
        return self._indices

    @property
    def index(self) -> np.ndarray:
        """The item ids (batchflow's name for ``indices``)."""
        return self._indices

    @property
    def size(self) -> int:
        """Number of items."""
        return len(self._indices)

    def __len__(self) -> int:
        return len(self._indices)

    def __iter__(self) -> Iterator:
        return iter(self._indices)

    def __getitem__(self, position: Any) -> Any:
        return self._indices[position]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(size={len(self)}, indices={np.array2string(self._indices, threshold=6)})"

    def __getstate__(self) -> dict:
        # A running batch generator cannot be pickled; iteration restarts after unpickling.
        state = self.__dict__.copy()
        state['_iter'] = state['_iter_key'] = None
        return state

    def get_pos(self, ids: Any, check: bool = True) -> np.ndarray:
        """Positions of item ``ids`` in this index (identity for the common ``0..n-1`` index).

        Args:
            ids: item ids.
            check: verify that every id is in the index; turn off only for ids known to come from it.

        Raises:
            ValueError: some ids are not in the index.
        """
        ids = np.asarray(ids)
        if ids.ndim == 0:
            return self.get_pos(ids.reshape(1), check)[0]
        if self._is_range is None:
            self._is_range = _is_range(self._indices)
        if self._is_range and ids.dtype.kind in 'iu':
            if check and len(ids) and (ids.min() < 0 or ids.max() >= len(self._indices)):
                raise ValueError(f"Expected item ids in 0..{len(self._indices) - 1}. Received ids out of range: "
                                 f"{ids[(ids < 0) | (ids >= len(self._indices))][:5]!r}")
            return ids
        if self._sorter is None:
            self._sorter = np.argsort(self._indices, kind='stable')
        places = np.searchsorted(self._indices, ids, sorter=self._sorter)
        places = np.minimum(places, len(self._indices) - 1)
        positions = self._sorter[places]
        if not check:
            return positions
        missing = self._indices[positions] != ids
        if np.any(missing):
            raise ValueError(f"Expected ids of this index. Received unknown ids: {np.atleast_1d(ids)[missing][:5]!r}")
        return positions

    def subset(self, positions: Any) -> DatasetIndex:
        """A sub-index of the items at ``positions``."""
        return self._from_ids(self._indices[np.asarray(positions, dtype=np.intp)], parent=self)

    def create_batch(self, index: Any, pos: bool = True) -> DatasetIndex:
        """A sub-index of the same class: ``index`` holds positions (``pos=True``) or item ids (``pos=False``)."""
        return self.subset(index) if pos else self.create_subset(index)

    def create_subset(self, index: Any) -> DatasetIndex:
        """A sub-index of the given item ids (an array-like or a ``DatasetIndex``), checked against this one."""
        ids = index.indices if isinstance(index, DatasetIndex) else _as_ids(index, allow_count=False)
        self.get_pos(ids)
        return self._from_ids(ids, parent=self)

    def split(self, shares: float | Sequence[float] | None = None, shuffle: bool | int = False, *,
              train: float | None = None, test: float | None = None, validation: float | None = None) -> None:
        """Split the items into ``train``, ``test`` and ``validation`` sub-indices.

        Args:
            shares: the train share (the rest is ``test``), or ``[train, test]`` / ``[train, test, validation]``
                shares summing to at most 1: ``validation`` takes every item train and test do not, so no item
                is left out (``[0.6, 0.3]`` is a 60/30/10 split). A non-zero share never gives an empty part.
                ``0.8`` when neither ``shares`` nor a named share is given.
            shuffle: ``False`` keeps the order, ``True`` or an int seed picks items at random. Each part keeps
                its items in index order.
            train, test, validation: the shares by name instead of ``shares``, summing to 1: ``split(train=0.8,
                validation=0.2)`` makes ``train`` and ``validation`` (``test`` is ``None``).
        """
        counts = split_counts(len(self), named_shares(shares, train=train, test=test, validation=validation))
        if isinstance(shuffle, (bool, int, np.integer)) or shuffle is None:
            # an int seeds numpy directly here (not the run's seed tree): splits made so far stay the same
            seed = None if isinstance(shuffle, bool) or shuffle is None else int(shuffle)
            order = np.random.default_rng(seed).permutation(len(self)) if shuffle else np.arange(len(self))
        else:
            order = self.shuffle(shuffle)
        parts, start = [], 0
        for count in counts:
            parts.append(self.subset(np.sort(order[start:start + count])) if count else None)
            start += count
        self.train, self.test, self.validation = parts

    def calc_split(self, shares: float | Sequence[float] | None = None, *, train: float | None = None,
                   test: float | None = None, validation: float | None = None) -> tuple[int, int, int]:
        """The sizes ``(train, test, validation)`` that ``split`` with these shares makes."""
        return tuple(split_counts(len(self), named_shares(shares, train=train, test=test, validation=validation)))

    def shuffle(self, shuffle: Any = False) -> np.ndarray:
        """Positions ``0..n-1`` in the order of an epoch shuffled by ``shuffle`` (see ``flowpipe.make_rng``)."""
        rng = shuffle_generator(shuffle)
        return np.arange(len(self)) if rng is None else rng.permutation(len(self))

    def n_batches(self, batch_size: int, n_iters: int | None = None, n_epochs: int | None = None,
                  drop_last: bool = False, whole_epochs: bool = False) -> int | None:
        """The number of batches ``gen_batch`` yields with these arguments, ``None`` when infinite."""
        return n_batches(len(self), batch_size, n_iters, n_epochs, drop_last, whole_epochs)

    def gen_batch(self, batch_size: int, shuffle: bool | int = False, n_iters: int | None = None,
                  n_epochs: int | None = None, drop_last: bool = False, seed: Any = None,
                  whole_epochs: bool = False) -> Iterator[DatasetIndex]:
        """Yield sub-indices of ``batch_size`` items (lazily; forever when neither limit is given).

        Args:
            batch_size: items per batch.
            shuffle: ``False``, ``True`` or an int seed; a new permutation every epoch, from one generator.
            n_iters: number of batches to yield.
            n_epochs: number of passes over the items (exclusive with ``n_iters``).
            drop_last: drop each epoch's incomplete tail; otherwise a batch may cross an epoch boundary and
                only the last batch may be short.
            seed: the run's root seed (int), or a ``SeedSequence``/``Generator`` to shuffle with.
            whole_epochs: every epoch ends with its own batch, short when ``batch_size`` does not divide the
                number of items (``DataLoader(drop_last=False)``'s batches); no batch crosses an epoch boundary.

        Raises:
            ValueError: empty index, ``batch_size < 1``, both limits, or ``batch_size > len`` with ``drop_last``.
        """
        check_batch_args(len(self), batch_size, n_iters, n_epochs, drop_last)
        rng = shuffle_generator(shuffle, seed)
        return self._gen_batch(gen_positions(len(self), batch_size, rng, n_iters, n_epochs, drop_last, whole_epochs))

    def _gen_batch(self, positions: Iterator[np.ndarray]) -> Iterator[DatasetIndex]:
        ids, from_ids = self._indices, self._from_ids
        for batch_positions in positions:
            yield from_ids(ids[batch_positions], parent=self)

    def next_batch(self, batch_size: int, shuffle: bool | int = False, n_iters: int | None = None,
                   n_epochs: int | None = None, drop_last: bool = False, seed: Any = None,
                   whole_epochs: bool = False) -> DatasetIndex:
        """The next batch of an iteration kept in the index (see ``gen_batch``; ``reset('iter')`` restarts it).

        ``batch_size`` may change from call to call: the iteration goes on from where it is. Calling with other
        ``shuffle``, ``n_iters``, ``n_epochs``, ``drop_last``, ``seed`` or ``whole_epochs`` starts a new iteration.

        Raises:
            StopIteration: the iteration's ``n_iters`` or ``n_epochs`` are exhausted.
        """
        key = (shuffle, type(shuffle), n_iters, n_epochs, drop_last, seed, whole_epochs)
        check_batch_args(len(self), batch_size, n_iters, n_epochs, drop_last)
        if self._iter is None or self._iter_key != key:
            self._iter = PositionCursor(len(self), shuffle_generator(shuffle, seed), n_epochs, drop_last,
                                        whole_epochs)
            self._iter_key, self._iter_count = key, 0
        positions = None if n_iters is not None and self._iter_count >= n_iters else self._iter.take(batch_size)
        if positions is None:
            raise StopIteration(f"The iteration of {n_iters} batches or {n_epochs} epochs is over; "
                                "reset('iter') starts a new one")
        self._iter_count += 1
        return self._from_ids(self._indices[positions], parent=self)

    def reset(self, what: str = 'iter') -> None:
        """Forget the iteration state of ``next_batch`` (``what='iter'``, the only state an index has)."""
        if what != 'iter':
            raise ValueError(f"Expected reset('iter') for an index. Received: what={what!r}")
        self._iter = self._iter_key = None
        self._iter_count = 0

    def reset_iter(self) -> None:
        """Forget the iteration state of ``next_batch`` (same as ``reset('iter')``)."""
        self.reset('iter')


SPLIT_PARTS = ('train', 'test', 'validation')


def named_shares(shares: Any, **named: float | None) -> Any:
    """``shares``, or the shares given by part name as a dict; ``0.8`` when none is given."""
    given = {name: value for name, value in named.items() if value is not None}
    if not given:
        return 0.8 if shares is None else shares
    if shares is not None:
        raise ValueError(f"Expected the shares either as shares= or by name ({', '.join(SPLIT_PARTS)}), not both. "
                         f"Received: shares={shares!r}, {given!r}; pass e.g. split(train=0.8, validation=0.2)")
    return given


def split_counts(size: int, shares: float | Sequence[float] | dict) -> list[int]:
    """Item counts of ``[train, test, validation]`` for ``shares``; non-zero shares get at least one item.

    One share is train's, and test takes the rest; with two or three, validation takes the rest. A dict gives the
    shares by part name, summing to 1 (a part it does not name gets no item).
    """
    values = _normalize_shares(shares)
    if not isinstance(shares, dict):
        values[2] = max(0.0, 1.0 - values[0] - values[1])
    raw = [share * size for share in values]
    counts = [int(np.floor(value + 1e-9)) for value in raw]
    if abs(sum(values) - 1) < 1e-9:
        # Shares covering everything must use every item: give the remainder to the largest fractions.
        for part in sorted(range(3), key=lambda i: counts[i] - raw[i])[:size - sum(counts)]:
            counts[part] += 1
    wanted = [part for part in range(3) if values[part] > 0]
    if len(wanted) > size:
        raise ValueError(f"Expected at least {len(wanted)} items to split into {len(wanted)} non-empty parts. "
                         f"Received: {size} items, shares={shares!r}; use fewer non-zero shares")
    for part in wanted:
        if counts[part] == 0:
            counts[part] = 1
            if sum(counts) > size:
                # Only parts with more than one item can give one away, and one exists as len(wanted) <= size.
                counts[max(range(3), key=lambda i: counts[i])] -= 1
    return counts


def _normalize_shares(shares: float | Sequence[float] | dict) -> list[float]:
    if isinstance(shares, dict):
        return _named_values(shares)
    if isinstance(shares, (int, float, np.number)) and not isinstance(shares, bool):
        values = [float(shares), 1 - float(shares)]
    elif isinstance(shares, (list, tuple, np.ndarray)) and not isinstance(shares, str):
        if not 1 <= len(shares) <= 3:
            raise ValueError("Expected shares to be a number or a list of 1 to 3 numbers [train, test, "
                             f"validation]. Received {len(shares)} shares: shares={shares!r}")
        values = [float(share) for share in shares]
    else:
        raise TypeError("Expected shares to be a number or a list of 1 to 3 numbers [train, test, validation]. "
                        f"Received: shares={shares!r}")
    if any(share < 0 or share > 1 for share in values) or sum(values) > 1 + 1e-9:
        raise ValueError(f"Expected shares in [0, 1] summing to at most 1. Received: shares={shares!r}; "
                         "e.g. shares=0.8 or shares=[0.7, 0.2, 0.1]")
    return values + [0.0] * (3 - len(values))


def _named_values(shares: dict) -> list[float]:
    """``[train, test, validation]`` from shares given by name: numbers in [0, 1] summing to 1."""
    for name, share in shares.items():
        if isinstance(share, bool) or not isinstance(share, (int, float, np.number)):
            raise TypeError(f"Expected {name} to be a number in [0, 1]. Received: {name}={share!r}")
    values = [float(shares.get(name, 0.0)) for name in SPLIT_PARTS]
    if any(not 0 <= share <= 1 for share in values) or abs(sum(values) - 1) > 1e-9:
        given = ', '.join(f'{name}={share!r}' for name, share in shares.items())
        raise ValueError(f"Expected named shares in [0, 1] summing to 1, so that no item is left out. Received: "
                         f"{given}; give the rest to a part, e.g. split(train=0.8, validation=0.2)")
    return values


def _as_ids(index: Any, allow_count: bool = True) -> np.ndarray:
    if isinstance(index, DatasetIndex):
        return index.indices
    if allow_count and isinstance(index, (int, np.integer)) and not isinstance(index, bool):
        if index < 1:
            raise ValueError(f"Expected a positive number of items. Received: index={index!r}; an empty dataset "
                             "has nothing to draw batches from")
        return np.arange(index)
    ids = np.asarray(index)
    if ids.ndim != 1:
        raise TypeError(f"Expected a 1-D array of item ids. Received an array of shape {ids.shape} "
                        f"from index={index!r:.80}")
    if len(ids) == 0:
        raise ValueError("Expected at least one item id. Received an empty index; an empty dataset has nothing to "
                         "draw batches from")
    return ids


def _check_unique(ids: np.ndarray) -> None:
    if _is_range(ids):
        return
    unique, counts = np.unique(ids, return_counts=True)
    if len(unique) != len(ids):
        raise ValueError(f"Expected unique item ids. Received duplicates: {unique[counts > 1][:5]!r}; number the items "
                         "and keep the names in a component (see docs/porting.md#item-ids-are-unique)")


def _is_range(ids: np.ndarray) -> bool:
    n = len(ids)
    return (ids.dtype.kind in 'iu' and n > 0 and ids[0] == 0 and ids[-1] == n - 1
            and bool(np.array_equal(ids, np.arange(n))))
