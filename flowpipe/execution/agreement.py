"""The ranks of a distributed job agree on what decides a run before its first batch.

Every rank draws the same global batches and trains the same model only when every rank runs the same pipeline with
the same batch size, epochs or iterations, ``drop_last``, ``whole_epochs``, shuffle and seed on the same index, and
the same config: a rank given other arguments or another config value (a typo, an environment variable) would train
on other batches or with another learning rate, silently, or hang in a collective that another sharding layout does
not join. So a run starts with one all-gather of each rank's root seed and the digest of its canonical description
of the run (``canonical.py``: run arguments, dataset, the whole pipeline config, every key of every model config,
evaluated, and every action with all its arguments; config keys named ``device`` or ``device_map`` are left out, as
each rank may name its own GPU there). Only when the digests differ, a second all-gather brings the descriptions,
and every rank raises ``ValueError`` naming each key that differs, its values and the ranks holding them; otherwise
every rank takes rank 0's seed (the one the run drew, when none was given).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .canonical import describe, differences, digest, flat, label

__all__ = ['agree_on_run']

#: config keys each rank may set to its own value
OWN_KEYS = ('device', 'device_map')


def agree_on_run(world: Any, pipeline: Any, args: Any, n_epochs: int | None, n_iters: int | None,
                 seeds: tuple[int, bool]) -> tuple[int, bool]:
    """Rank 0's root seed, after checking that every rank runs the same batches (see the module docstring).

    Args:
        world: the job's ``World``; ``None`` outside a distributed job (nothing to agree on).
        pipeline, args: the run's pipeline and ``RunArgs``.
        n_epochs, n_iters: the limits the run uses (one epoch when neither was given).
        seeds: this rank's root seed and whether it was given.

    Raises:
        ValueError: the ranks differ in a term that decides the run.
    """
    if world is None:
        return seeds
    from ..parallel import distributed
    terms = _terms(pipeline, replace(args, n_epochs=n_epochs, n_iters=n_iters), world.size)
    every = distributed.all_gather((seeds[0], digest(terms)))
    if len({rank_digest for _, rank_digest in every}) > 1:     # every rank sees it: every rank gathers again
        lines = _lines([flat(rank_terms) for rank_terms in distributed.all_gather(terms)])
        raise ValueError(f'Expected every rank of the distributed job to run the same pipeline on the same batches. '
                         f'Received: {"; ".join(lines)}. Give every rank the same run() arguments, dataset, actions '
                         f'and config (look for a value read from the environment or from the rank).')
    return every[0][0], seeds[1]


def _terms(pipeline: Any, args: Any, world_size: int) -> dict[str, Any]:
    """The run's canonical description without the config keys each rank may set on its own."""
    terms = describe(pipeline, args, world_size)
    terms['config'] = _shared(terms['config'])
    terms['models'] = {name: _shared(config) for name, config in terms['models'].items()}
    return terms


def _shared(config: dict[str, str]) -> dict[str, str]:
    return {path: value for path, value in config.items() if path.rsplit('/', 1)[-1] not in OWN_KEYS}


def _lines(every: list[dict[tuple, str]]) -> list[str]:
    """One line per key on which the ranks differ: each value with the ranks that hold it."""
    return [' vs '.join(f'{_term(key, value)} on {_ranks(ranks)}' for value, ranks in _grouped(values))
            for key, values in differences(every)]


def _term(key: tuple, value: str) -> str:
    if key[0] == 'action':
        return f'{label(key)} {value}'
    return f'{value} actions' if key[0] == 'actions' else f'{label(key)}={value}'


def _grouped(values: list) -> list[tuple[Any, list[int]]]:
    """``(value, ranks holding it)`` in the order of the first rank holding each value."""
    groups: dict[str, tuple[Any, list[int]]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(repr(value), (value, []))[1].append(rank)
    return list(groups.values())


def _ranks(ranks: list[int]) -> str:
    return f'rank {ranks[0]}' if len(ranks) == 1 else f'ranks {ranks}'
