"""The machinery of ``Batch.apply_parallel``: per-item calls, per-item arguments and seeds, collecting results.

Items run in the calling thread by default: the pipeline's prefetch already spreads batches over threads, and a
pool per batch would cost more than most per-item functions. ``workers=`` opts into a pool for heavy functions.
"""
from __future__ import annotations

import functools
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np

from flowpipe.data.arrays import object_array
from flowpipe.expr import PerItem
from flowpipe.expr.special import accepts_rng, draw_for_items

__all__ = ['accepts_rng', 'apply_parallel', 'apply_to_items', 'assemble', 'collect', 'is_per_item', 'run_items',
           'workers_for']

_NUMBERS = (int, float, bool, complex, np.generic)


def is_per_item(value: Any) -> bool:
    """Whether ``value`` is a ``PerItem`` sequence (from ``P(...)``): one entry per batch item."""
    return isinstance(value, PerItem)


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
                   p: float | None, args: tuple, kwargs: dict, workers: int | None = None,
                   with_rng: bool = False) -> None:
    """Map ``func`` over the items of ``batch``'s ``src`` components into ``dst`` (see ``Batch.apply_parallel``).

    A list ``src`` applies ``func`` to each component on its own (into the matching ``dst``), with the same
    items chosen by ``p`` and the same per-item generators for all of them; a tuple ``src`` gives ``func`` one
    tuple per item. ``with_rng`` passes ``rng=`` even when ``func``'s signature does not show it.
    """
    if not callable(func):
        raise TypeError(f"Expected func to be callable. Received: func={func!r}")
    size = len(batch)
    selected = _selected_positions(batch, p, size)
    # spawned for the whole global batch in a distributed run (``draw_for_items``): an item's generator is the one it
    # has in one process, whatever the world size
    seeds = (draw_for_items(batch, size, batch.seed.spawn) if 'rng' not in kwargs and (with_rng or accepts_rng(func))
             else None)
    for source, target in _pairs(src, dst):
        _apply_pair(batch, func, source, target, selected, seeds, args, kwargs, workers)


def _pairs(src: Any, dst: Any) -> list[tuple[Any, Any]]:
    """``(source, target)`` pairs: one per component of a list ``src``, else one for the whole ``src``."""
    if src is None:
        raise ValueError("Expected src: a component name, a list of them (each on its own) or a tuple of them (one "
                         "tuple per item). Received: src=None; pass src= by keyword, e.g. src='images'")
    if not isinstance(src, list):
        return [(src, src if dst is None else dst)]
    targets = src if dst is None else dst
    if not isinstance(targets, list) or len(targets) != len(src):
        raise ValueError(f"Expected a list dst as long as the list src (one result component per source). "
                         f"Received: src={src!r}, dst={dst!r}")
    return list(zip(src, targets))


def _apply_pair(batch: Any, func: Callable, source: Any, target: Any, selected: Sequence[int], seeds: Any,
                args: tuple, kwargs: dict, workers: int | None) -> None:
    sources = [source] if isinstance(source, str) else list(source)
    targets = [target] if isinstance(target, str) else list(target)
    size = len(batch)
    columns = [_source(batch, name) for name in sources]
    items = columns[0] if isinstance(source, str) else _Zipped(columns)
    results = run_items(_item_call(batch, func, items, args, kwargs, size, seeds), selected, workers)
    outputs = [results] if len(targets) == 1 else _unzip(results, len(targets))
    for name, values in zip(targets, outputs):
        if len(selected) != size:
            values = _fill_unselected(values, selected, columns, sources, targets, name, size)
        _store(batch, name, values)


def _store(batch: Any, name: str, values: list) -> None:
    """Component ``name`` (added when new) set to ``values`` collected into one array."""
    if name in batch.components:
        setattr(batch, name, collect(values))
    else:
        batch.add_components(name, collect(values))


def assemble(batch: Any, results: Sequence[Any], dst: str | Sequence[str] | None) -> None:
    """Write per-item ``results`` into ``dst``: one component takes them as they are, several a tuple (or row)
    per item, split. An exception among the results (a failed item) raises ``RuntimeError`` instead."""
    failures = [result for result in results if isinstance(result, BaseException)]
    if failures:
        raise RuntimeError(f"Could not assemble the batch: {len(failures)} of {len(results)} items failed, the "
                           f"first with {failures[0]!r}. Fix the per-item function.") from failures[0]
    if dst is None:
        raise ValueError("Expected the components to fill. Received: dst=None, src=None, dst_default=None. "
                         "Pass dst='name' or dst=['a', 'b'].")
    targets = [dst] if isinstance(dst, str) else list(dst)
    if len(results) != len(batch):
        raise ValueError(f"Expected one result per item ({len(batch)}). Received: {len(results)} results.")
    outputs = [list(results)] if len(targets) == 1 else _unzip(results, len(targets))
    for name, values in zip(targets, outputs):
        _store(batch, name, values)


class _Zipped:
    """Item ``i`` of several columns as one tuple (a tuple ``src``)."""
    __slots__ = ('columns',)

    def __init__(self, columns: list):
        self.columns = columns

    def __getitem__(self, i: int) -> tuple:
        return tuple(column[i] for column in self.columns)


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
    return np.flatnonzero(draw_for_items(batch, size, batch.random.random) < p).tolist()


def _item_call(batch: Any, func: Callable, items: Any, args: tuple, kwargs: dict, size: int,
               seeds: Any) -> Callable:
    per_args = [k for k, value in enumerate(args) if is_per_item(value)]
    per_kwargs = [name for name, value in kwargs.items() if is_per_item(value)]
    for value in [args[k] for k in per_args] + [kwargs[name] for name in per_kwargs]:
        if len(value) != size:
            raise ValueError(f"Expected a per-item argument with {size} values, one per batch item. "
                             f"Received {len(value)} values")
    if not (per_args or per_kwargs or seeds):
        return lambda i: func(items[i], *args, **kwargs)

    def call(i: int) -> Any:
        item_args = list(args)
        for k in per_args:
            item_args[k] = args[k][i]
        item_kwargs = dict(kwargs)
        for name in per_kwargs:
            item_kwargs[name] = kwargs[name][i]
        if seeds is not None:
            item_kwargs['rng'] = np.random.default_rng(seeds[i])
        return func(items[i], *item_args, **item_kwargs)
    return call


def _unzip(results: list, count: int) -> list[list]:
    for result in results:
        if not isinstance(result, (tuple, list, np.ndarray)) or len(result) != count:
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


def workers_for(target: str | None, workers: int | None) -> int | None:
    """The thread count for batchflow's ``target`` (``'for'``/``'f'`` or ``'threads'``/``'t'``) and ``workers``."""
    if target in (None, 'for', 'f') or workers is not None:
        return workers
    if target in ('threads', 't'):
        return os.cpu_count() or 1
    raise ValueError(f"Expected target 'for' or 'threads'. Received: target={target!r}; flowpipe runs items in "
                     "threads (prefetch=, target='processes' moves whole batches to processes)")


def apply_parallel(method: Callable | None = None, **defaults: Any) -> Callable:
    """Make ``method(self, item, *args, **kwargs)`` a batch action mapped over items (batchflow's decorator).

    ``@apply_parallel`` or ``@apply_parallel(src='images')``: calling the action runs
    ``batch.apply_parallel(method, src=..., dst=..., p=..., *args, **kwargs)``; ``src``, ``dst``, ``p``, ``workers``,
    ``target``, ``requires_rng`` are keywords of the call, with the decorator's keywords as defaults.
    """
    from .base import ActionSpec  # base imports this module lazily, in apply_parallel

    def wrap(func: Callable) -> Callable:
        @functools.wraps(func)
        def per_item_action(self: Any, *args: Any, **kwargs: Any) -> Any:
            options = {**defaults, **kwargs}
            src, dst, p = options.pop('src', 'images'), options.pop('dst', None), options.pop('p', None)
            return self.apply_parallel(func.__get__(self), src, dst, p, *args, **options)
        per_item_action.action = ActionSpec()
        return per_item_action

    if method is None:
        return wrap
    if not callable(method):
        raise TypeError(f"Expected @apply_parallel on a method, or keyword defaults. Received: {method!r}")
    return wrap(method)
