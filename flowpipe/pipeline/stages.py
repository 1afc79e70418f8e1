"""How many pipeline stages a run's models ask for (``'pipeline'``), read before the first batch: the run splits
every global batch over the pipelines (``flowpipe.parallel.mesh``), so the ranks of one pipeline read the same items.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ExpressionError
from ..expr import contains_expressions, evaluate
from ..expr.context import Context
from .resumed_layout import overrides

__all__ = ['pipeline_stages', 'reading_ranks']


def pipeline_stages(records: Any, context: Context | None = None) -> int | None:
    """The number of pipeline stages (``'pipeline'``) the models that ``init_model`` declares among ``records`` (or
    ``import_model`` brings from another pipeline) ask for, ``None`` when none asks; the run's data side splits batches over the pipelines it gives (one value for every
    pipelined model of a run: its ranks read the same items).

    A run resuming under ``resumed_with(pipeline=...)`` (``pipeline.resumed_layout``) (``python -m flowpipe verify --stages``) builds its
    models with that value: it is the run's.

    Raises:
        ValueError: two models asking for different numbers of stages.
    """
    given = overrides()
    if given is not None and 'pipeline' in given:
        return given['pipeline'] if given['pipeline'] not in (False, 1) else None
    found: dict[str, Any] = {}
    for record in records:
        action = getattr(record, 'name', None)
        if action == 'import_model':        # a built model of another pipeline: its plan says
            name, source = (*record.args, *record.kwargs.values())[:2]
            try:
                model = source.m(name) if callable(getattr(source, 'm', None)) else source
            except ExpressionError:         # no such model: the action says so when it runs
                continue
            found[name] = _stages_of(model)
            continue
        if action != 'init_model':
            continue
        static, config = record.kwargs.get('static'), record.kwargs.get('config')
        if static is not None:
            stages = getattr(static.model.plan.pipeline, 'stages', None)
        else:
            from ..config import Config
            flat = Config(config) if isinstance(config, Mapping) else Config({})
            stages = flat.get('pipeline')
            if contains_expressions(stages):
                stages = evaluate(stages, context if context is not None else Context())
        found[record.kwargs.get('name')] = stages
    found = {name: stages for name, stages in found.items() if stages not in (None, False, 1)}
    if len(set(found.values())) > 1:
        raise ValueError(f"Expected one number of pipeline stages for every pipelined model of a run (their ranks "
                         f"read the same items). Received: {found}. Give the models the same 'pipeline'.")
    return next(iter(found.values()), None)


def _stages_of(model: Any) -> Any:
    """A model's stage count: a built model's plan's, a declared one's config key."""
    placement = getattr(model, 'placement', None)
    if callable(placement):             # a PendingModel: its placement keys, read before the first batch
        return placement().get('pipeline')
    return getattr(getattr(getattr(model, 'plan', None), 'pipeline', None), 'stages', None)


def reading_ranks(records: Any, world: Any) -> list[int] | None:
    """The ranks whose items count once in a run of ``records`` in ``world``: one per pipeline (its first stage), in
    the order of their parts of each batch; ``None`` outside a distributed job (``Validate`` merges these ranks'
    variables)."""
    if world is None or world.size <= 1:
        return None
    from ..data.shards import run_mesh
    mesh = run_mesh(world, pipeline_stages(records))
    return [group[0] for group in mesh.groups('pp')]
