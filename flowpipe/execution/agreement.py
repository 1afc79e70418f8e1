"""The ranks of a distributed job agree on what decides a run's batches before the first one.

Every rank draws the same global batches only when every rank runs the same pipeline with the same batch size,
epochs or iterations, ``drop_last``, shuffle and seed on the same index. A rank given other arguments (a typo,
an environment variable) would train on other batches, silently or until a collective times out. So a run starts
with one all-gather of each rank's terms (run arguments, dataset, actions and config, as the checkpoints'
fingerprint writes them; config keys named ``device`` are left out, as each rank may name its own GPU there) and of
its root seed: any difference raises ``ValueError`` on every rank, naming the
ranks and their values; otherwise every rank takes rank 0's seed (the one the run drew, when none was given).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .checkpoint import stable_repr, fingerprint

__all__ = ['agree_on_run']


def agree_on_run(world: Any, pipeline: Any, args: Any, n_epochs: int | None, n_iters: int | None,
                 seeds: tuple[int, bool]) -> tuple[int, bool]:
    """Rank 0's root seed, after checking that every rank runs the same batches (see the module docstring).

    Args:
        world: the job's ``World``; ``None`` outside a distributed job (nothing to agree on).
        pipeline, args: the run's pipeline and ``RunArgs``.
        n_epochs, n_iters: the limits the run uses (one epoch when neither was given).
        seeds: this rank's root seed and whether it was given.

    Raises:
        ValueError: the ranks differ in a term that decides the batches.
    """
    if world is None:
        return seeds
    from ..parallel import distributed
    terms = _terms(pipeline, replace(args, n_epochs=n_epochs, n_iters=n_iters))
    every = distributed.all_gather((seeds[0], terms))
    lines = _differences([rank_terms for _, rank_terms in every])
    if lines:
        raise ValueError(f'Expected every rank of the distributed job to run the same pipeline on the same batches. '
                         f'Received: {"; ".join(lines)}. Give every rank the same run() arguments, dataset, actions '
                         f'and config (look for a value read from the environment or from the rank).')
    return every[0][0], seeds[1]


def _terms(pipeline: Any, args: Any) -> dict[str, Any]:
    """The terms that decide the batches, by name: each run argument, the dataset, the config, the actions."""
    saved = fingerprint(pipeline, args)
    config = {key: value for key, value in pipeline.config.flatten().items()
              if not (isinstance(key, str) and key.rsplit('/', 1)[-1] == 'device')}
    return {**saved['run'], 'dataset': saved['dataset'], 'config': stable_repr(config), 'actions': saved['actions']}


def _differences(every: list[dict[str, Any]]) -> list[str]:
    """One line per term on which the ranks differ: each value with the ranks that hold it."""
    lines = []
    for name in sorted(set().union(*every), key=lambda key: (key in ('dataset', 'config', 'actions'), key)):
        values = [terms.get(name, '(not given)') for terms in every]
        if len({repr(value) for value in values}) < 2:
            continue
        if name == 'actions':
            lines.extend(_action_lines(values))
        else:
            lines.append(' vs '.join(f'{name}={value} on {_ranks(ranks)}' for value, ranks in _grouped(values)))
    return lines


def _action_lines(every: list[list[str]]) -> list[str]:
    """The first action that differs, and the numbers of actions when they differ."""
    lines = []
    for position in range(max(len(actions) for actions in every)):
        at = [actions[position] if position < len(actions) else '(none)' for actions in every]
        if len(set(at)) > 1:
            lines.append(' vs '.join(f'action #{position} {value} on {_ranks(ranks)}' for value, ranks in _grouped(at)))
            break
    counts = [len(actions) for actions in every]
    if len(set(counts)) > 1:
        lines.append(' vs '.join(f'{count} actions on {_ranks(ranks)}' for count, ranks in _grouped(counts)))
    return lines


def _grouped(values: list) -> list[tuple[Any, list[int]]]:
    """``(value, ranks holding it)`` in the order of the first rank holding each value."""
    groups: dict[str, tuple[Any, list[int]]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(repr(value), (value, []))[1].append(rank)
    return list(groups.values())


def _ranks(ranks: list[int]) -> str:
    return f'rank {ranks[0]}' if len(ranks) == 1 else f'ranks {ranks}'
