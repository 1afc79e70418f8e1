"""Resuming a run checkpoint on another layout: other ranks, devices, micro-batches or sharding.

A checkpoint records its layout (the world size, the run's pipeline stages, and each model's devices, micro-batch
size, device weights and stages). A run resuming it on another layout

- builds each model from the checkpoint with the resumed run's placement (``resume_changes``: the changed
  ``device``, ``microbatch``..., or the config items ``resumed_with`` gives), the weights and optimizer state
  gathered or resharded;
- gives each new rank the variables one rule decides (``rank_state``), over the parts every global batch is
  read in (one per rank, or per pipeline: its stages read the same items, ``flowpipe.parallel.mesh``): on as many
  parts as the checkpoint's, each rank takes the variables of the checkpoint's reader of its part; on another
  number, a variable equal on every reader of the checkpoint is every rank's, a list each reader extended with its
  own values is merged as ``Validate`` merges them (``merge_variables``: the initial items, then part 0's, part
  1's...) onto the ranks of part 0, the others starting from the initial value, and any other per-rank variable
  is refused, named;
- refuses a model with dropout layers whose masks follow the layout (``'randomness': 'torch'``; under the default
  ``'by_item'`` the masks are the item's on every layout).

On the same world size and stages every rank takes back its own variables and random states, as before.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

import dill

from .merged_variables import merge_variables
from .nodes import CheckpointError

__all__ = ['check_random_layers', 'layout_of', 'model_layout', 'rank_state', 'saved_layout']

_MISSING = object()


# ----- the layout a checkpoint records -----

def model_layout(model: Any) -> dict:
    """What cuts a model's batches into pieces: its devices, micro-batch size and device weights; and, for a
    model pipelined over ranks, its number of stages (``'pipeline'``)."""
    plan = model.plan
    layout = {'devices': [str(device) for device in plan.devices], 'microbatch': plan.microbatch,
              'device_weights': None if plan.device_weights is None else list(plan.device_weights)}
    stages = getattr(getattr(plan, 'mesh', None), 'pp', 1)
    if stages > 1:
        layout['pipeline'] = stages
    return layout


def layout_of(models: Mapping[str, Any], world_size: int, stages: int | None = None) -> dict:
    """The layout a checkpoint records: ``{'world_size': n, 'models': {name: model_layout}}`` of built models, and
    ``'pipeline'``: the run's stages (its ranks split into pipelines that read the same items), when there are."""
    layout = {'world_size': world_size, 'models': {name: model_layout(model) for name, model in models.items()}}
    if world_size > 1 and stages is not None and stages > 1:
        layout['pipeline'] = stages
    return layout


def saved_layout(saved: Mapping[str, Any]) -> dict:
    """A checkpoint's layout; for one written before layouts were recorded, its world size alone."""
    if saved.get('layout') is not None:
        return saved['layout']
    ranks = saved.get('ranks')
    return {'world_size': 1 if ranks is None else len(ranks), 'models': {}}


def _describe(world_size: int, layout: Mapping[str, Any] | None) -> str:
    where = 'one process' if world_size == 1 else f'{world_size} ranks'
    if layout is None:
        return where
    microbatch = f", microbatch={layout['microbatch']}" if layout['microbatch'] else ''
    weights = f", device_weights={layout['device_weights']}" if layout['device_weights'] else ''
    stages = f", pipeline={layout['pipeline']}" if layout.get('pipeline') else ''
    return f"{where}, devices {', '.join(layout['devices'])}{microbatch}{weights}{stages}"


# ----- random layers -----

def _dropout_layers(network: Any) -> list[str]:
    """``name (Type p=...)`` of the network's dropout modules that draw (``p > 0``)."""
    from torch import nn
    return [f"{name or type(network).__name__!r} ({type(module).__name__} p={module.p})"
            for name, module in network.named_modules()
            if isinstance(module, nn.modules.dropout._DropoutNd) and module.p > 0]


def check_random_layers(name: str, model: Any, saved: Mapping[str, Any], world_size: int) -> None:
    """Refuse resuming ``model`` on a layout other than the checkpoint's (``saved``: ``saved_layout``) when its
    dropout masks follow the layout: dropout layers drawing from torch's generators (the plan's ``randomness`` other
    than ``'by_item'``)."""
    before = saved['models'].get(name)
    now = model_layout(model)
    if saved['world_size'] == world_size and (before is None or before == now):
        return
    randomness = getattr(model.plan, 'randomness', 'torch')
    layers = _dropout_layers(model.model) if randomness != 'by_item' else []
    if layers:
        raise CheckpointError(
            f"Expected a model whose random layers draw by item to resume on another layout. Received: model "
            f"{name!r} with 'randomness': {randomness!r} and dropout layers {', '.join(layers)}; the checkpoint was "
            f"written on {_describe(saved['world_size'], before)}, this run is on {_describe(world_size, now)}. "
            "Under torch's generators each piece of a batch draws its masks from its place in the layout, so the "
            "resumed run would not continue the checkpoint's trajectory. Resume on the checkpoint's layout, or "
            "train with 'randomness': 'by_item'.")


# ----- variables and random states per rank -----

def _same(first: Any, second: Any) -> bool:
    if first is second:
        return True
    try:
        return dill.dumps(first) == dill.dumps(second)
    except Exception:  # noqa: BLE001 - a value that does not pickle is compared as different
        return False


def _added(start: Any, value: Any) -> list | None:
    """The items ``value`` added to the list ``start``; ``None`` when it is not ``start`` extended."""
    if not isinstance(value, list) or not isinstance(start, list) or len(value) < len(start):
        return None
    if not all(_same(item, first) for item, first in zip(value, start)):
        return None
    return value[len(start):]


def _merged(ranks: list[Mapping[str, Any]], initial: Mapping[str, Any]) -> tuple[dict, dict]:
    """``(shared, merged)``: the variables equal on every rank, and the lists each rank extended, merged."""
    shared, added, refused = {}, {}, []
    for name in sorted({name for variables in ranks for name in variables}):
        values = [variables.get(name, _MISSING) for variables in ranks]
        if all(_same(values[0], value) for value in values[1:]):
            if values[0] is not _MISSING:
                shared[name] = values[0]
            continue
        start = initial.get(name, [])
        extended = [_added(start, [] if value is _MISSING else value) for value in values]
        if any(items is None for items in extended):
            refused.append(name)
        else:
            added[name] = extended
    if refused:
        raise CheckpointError(
            f"Expected variables that a resumed run on another number of ranks can continue. Received: "
            f"{', '.join(map(repr, refused))} differing between the checkpoint's ranks and changed in place per "
            "rank (set, summed into or overwritten with the rank's own values), which no rule shares out over "
            "another number of ranks. Keep such values in lists extended batch by batch (V(name, mode='a')), "
            "or resume on the checkpoint's number of ranks.")
    starts = {name: list(initial.get(name, [])) for name in added}
    per_rank = [{name: ('items', items[rank]) for name, items in added.items()} for rank in range(len(ranks))]
    return shared, merge_variables(starts, per_rank)


def _parts(world_size: int, stages: int | None) -> int:
    """How many parts a run of ``world_size`` ranks in pipelines of ``stages`` reads every global batch in (rank
    ``r`` reads part ``r % parts``: ranks are laid out with the stages outermost, ``flowpipe.parallel.mesh``)."""
    return max(world_size // (stages or 1), 1)


def rank_state(saved: Mapping[str, Any], rank: int, world_size: int, initial: Mapping[str, Any],
               stages: int | None = None) -> dict:
    """The variables and random states rank ``rank`` of ``world_size`` resumes with (``initial``: the run's
    variables before the checkpoint's are put in; ``stages``: the run's pipeline stages, ``None`` for none).

    The checkpoint's own layout (number of ranks and stages): each rank's own. Another with as many parts of every
    global batch (``_parts``): the variables of the checkpoint's rank that read this rank's part (its first stage);
    another number of parts: the shared variables on every rank, the lists merged over the checkpoint's parts on the
    ranks of part 0 (the other ranks start them from their initial value). The random states: the rank of the same
    number's, rank 0's for a rank the checkpoint did not have.
    """
    ranks = saved['ranks'] or [{'variables': saved['variables'], 'random': saved['random']}]
    before = saved_layout(saved).get('pipeline') if saved.get('ranks') else None
    random = ranks[rank if rank < len(ranks) else 0]['random']
    if len(ranks) == world_size and (before or 1) == (stages or 1):
        return ranks[rank]
    parts, part = _parts(len(ranks), before), rank % _parts(world_size, stages)
    if parts == _parts(world_size, stages):
        return {'variables': ranks[part]['variables'], 'random': random}
    shared, merged = _merged([own['variables'] for own in ranks[:parts]], initial)
    if part != 0:
        merged = {name: copy.deepcopy(initial.get(name, [])) for name in merged}
    return {'variables': {**shared, **merged}, 'random': random}
