"""The machinery of ``Batch.apply_parallel``: per-item calls, per-item arguments and seeds, collecting results.

Items run in the calling thread by default: the pipeline's prefetch already spreads batches over threads, and a
pool per batch would cost more than most per-item functions. ``workers=`` opts into a pool for heavy functions.
"""
from __future__ import annotations

import functools
import inspect
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np

from flowpipe.data.arrays import object_array
from flowpipe.expr import PerItem

__all__ = ['accepts_rng', 'apply_to_items', 'collect', 'is_per_item', 'run_items']

_NUMBERS = (int, float, bool, complex, np.generic)


def is_per_item(value: Any) -> bool:
    """Whether ``value`` is a ``PerItem`` sequence (from ``P(...)``): one entry per batch item."""
    return isinstance(value, PerItem)


def accepts_rng(func: Callable) -> bool:
    """Whether ``func`` takes a keyword argument named ``rng``."""
    return _accepts_rng(getattr(func, '__func__', func))


@functools.lru_cache(maxsize=256)
def _accepts_rng(func: Callable) -> bool:
    try:
        parameter = inspect.signature(func).parameters.get('rng')
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)


def collect(values: Sequence[Any]) -> Any:
    """Stack ``values`` when they are arrays (or tensors) of one shape or numbers, else make a 1-D object array."""
    if not values:
        return np.empty(0, dtype=object)
    first = values[0]
    torch = sys.modules.get('torch')  # tensors stack as tensors; batch code never imports torch itself
    if torch is not None and isinstance(first, torch.Tensor):
        if all(isinstance(value, torch.Tensor) and value.shape == first.shape for value in values):
            return torch.stack(list(values))
    elif isinstance(first, np.ndarray):
        if all(isinstance(value, np.ndarray) and value.shape == first.shape for value in values):
            return np.stack(values)
    elif isinstance(first, _NUMBERS) and all(isinstance(value, _NUMBERS) for value in values):
        return np.asarray(values)
    return object_array(values)


def run_items(call: Callable[[int], Any], positions: Sequence[int], workers: int | None = None) -> list:
    """``[call(i) for i in positions]``, in a thread pool of ``workers`` threads when that is more than one."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"Expected workers to be a positive int or None. Received: workers={workers!r}")
    if not workers or workers == 1 or len(positions) < 2:
        return [call(position) for position in positions]
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix='flowpipe-apply')
    try:
        return list(pool.map(call, positions))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def apply_to_items(batch: Any, func: Callable, src: str | Sequence[str], dst: str | Sequence[str] | None,
                   p: float | None, args: tuple, kwargs: dict, workers: int | None = None) -> None:
    """Map ``func`` over the items of ``batch``'s ``src`` components into ``dst`` (see ``Batch.apply_parallel``)."""
    if not callable(func):
        raise TypeError(f"Expected func to be callable. Received: func={func!r}")
    sources = [src] if isinstance(src, str) else list(src)
    targets = sources if dst is None else ([dst] if isinstance(dst, str) else list(dst))
    size = len(batch)
    columns = [_source(batch, name) for name in sources]
    selected = _selected_positions(batch, p, size)
    call = _item_call(batch, func, columns, args, kwargs, size)
    results = run_items(call, selected, workers)
    if len(targets) == 1:
        outputs = [results]
    else:
        outputs = _unzip(results, len(targets))
    for target, values in zip(targets, outputs):
        if len(selected) != size:
            values = _fill_unselected(values, selected, columns, sources, targets, target, size)
        if target in batch.components:
            setattr(batch, target, collect(values))
        else:
            batch.add_components(target, collect(values))


def _source(batch: Any, name: str) -> Any:
    if name not in batch.components:
        raise ValueError(f"Expected src among the batch's components {batch.components!r}. Received: {name!r}")
    values = getattr(batch, name)
    if values is None:
        raise ValueError(f"Expected component {name!r} to hold data. Received None; load or add it first")
    return values


def _selected_positions(batch: Any, p: float | None, size: int) -> Sequence[int]:
    if p is None:
        return range(size)
    if isinstance(p, bool) or not isinstance(p, _NUMBERS) or not 0 <= p <= 1:
        raise ValueError(f"Expected p to be a probability in [0, 1] or None. Received: p={p!r}")
    return np.flatnonzero(batch.random.random(size) < p).tolist()


def _item_call(batch: Any, func: Callable, columns: list, args: tuple, kwargs: dict, size: int) -> Callable:
    per_args = [k for k, value in enumerate(args) if is_per_item(value)]
    per_kwargs = [name for name, value in kwargs.items() if is_per_item(value)]
    for value in [args[k] for k in per_args] + [kwargs[name] for name in per_kwargs]:
        if len(value) != size:
            raise ValueError(f"Expected a per-item argument with {size} values, one per batch item. "
                             f"Received {len(value)} values")
    seeds = batch.seed.spawn(size) if 'rng' not in kwargs and accepts_rng(func) else None
    if not (per_args or per_kwargs or seeds):
        return lambda i: func(*[column[i] for column in columns], *args, **kwargs)

    def call(i: int) -> Any:
        item_args = list(args)
        for k in per_args:
            item_args[k] = args[k][i]
        item_kwargs = dict(kwargs)
        for name in per_kwargs:
            item_kwargs[name] = kwargs[name][i]
        if seeds is not None:
            item_kwargs['rng'] = np.random.default_rng(seeds[i])
        return func(*[column[i] for column in columns], *item_args, **item_kwargs)
    return call


def _unzip(results: list, count: int) -> list[list]:
    for result in results:
        if not isinstance(result, (tuple, list)) or len(result) != count:
            raise ValueError(f"Expected func to return {count} values per item, one per dst component. "
                             f"Received: {result!r:.80}")
    return [[result[k] for result in results] for k in range(count)]


def _fill_unselected(values: list, selected: Sequence[int], columns: list, sources: list, targets: list,
                     target: str, size: int) -> list:
    """Items left out by ``p`` keep their source value (the matching src, or the only one)."""
    if len(sources) == len(targets):
        column = columns[targets.index(target)]
    elif len(sources) == 1:
        column = columns[0]
    else:
        raise ValueError(f"Expected as many dst as src components when p is used, so unchanged items can be "
                         f"copied. Received: src={sources!r}, dst={targets!r}")
    filled = [column[i] for i in range(size)]
    for position, value in zip(selected, values):
        filled[position] = value
    return filled
