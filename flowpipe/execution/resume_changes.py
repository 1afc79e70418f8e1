"""What a resumed run may change from the run that wrote its checkpoint, and how the new values take effect.

The two runs are compared by their canonical descriptions (``canonical.py``): every run argument that decides the
batches, the dataset, the whole pipeline config, every key of every model config (nested, evaluated) and every
action with all its arguments. A difference is refused (``CheckpointError`` naming each key, ``old → new``),
except for these, which take their new value with a warning naming the key:

- the run arguments ``n_epochs`` and ``n_iters``: the run goes on to the new limit (the batches after the
  checkpoint are those a run with the new limit draws);
- a model's optimizer hyper-parameters (``optimizer/lr``, ``optimizer/momentum``, ``optimizer/weight_decay``,
  ``optimizer/betas``...; not ``optimizer/name``): set in the restored optimizer's parameter groups, which the saved
  state would otherwise bring back. The learning rate is applied as the factor new/old on the restored rates and on
  the schedules' base rates, so a schedule keeps its progress (without a schedule, the rate is the new one);
- a model's placement (``device``, ``microbatch``, ``device_weights``, ``pin_memory``, and pipeline parallelism:
  ``pipeline``, ``pipeline_split``, ``pipeline_schedule``): the model is rebuilt on the new devices or stages (on
  the CPU this does not change the results); so is ``checkpoint_activations``, which changes no result either
  (``flowpipe.models.torch.checkpointing``); a key dropped from the config is rebuilt with ``None`` (its default);
- the number of processes (``world_size``): each rank's variables and random states are shared out as
  ``relayout.rank_state`` says (``relayout``: resuming on another layout, and what it refuses);
- a pipeline config key read only by the keys above (``'optimizer': {'lr': C('lr')}`` and ``pipeline << {'lr':
  0.5}``): its effect is the model key's, which the warning names; and a pipeline config key named ``device``
  (each rank of a job may name its own GPU there, as the ranks' agreement allows).

Arguments that do not decide the batches (``prefetch``, ``bar``, ``target``, ``workers``, ``profile``) are not part
of the description and may change silently. The callbacks' own settings (``EarlyStopping``'s patience) are the
resumed run's callbacks'; their counters come from the checkpoint.
"""
from __future__ import annotations

import ast
import warnings
from typing import Any

from .canonical import differences, flat, label, model_configs
from .nodes import CheckpointError

__all__ = ['PLACEMENT', 'RUN_LAYOUT', 'RUN_LIMITS', 'allowed_changes', 'apply_optimizer_changes', 'model_overrides',
           'warn_changes']

RUN_LIMITS = ('n_epochs', 'n_iters')
#: run terms of the layout: a checkpoint resumes on another (``relayout``)
RUN_LAYOUT = ('world_size',)
PLACEMENT = ('device', 'microbatch', 'device_weights', 'pin_memory', 'checkpoint_activations', 'pipeline',
             'pipeline_split', 'pipeline_schedule')

Change = tuple[tuple, str, str]


def allowed_changes(saved: dict[str, Any], now: dict[str, Any], path: str) -> list[Change]:
    """The ``(key, old, new)`` changes a resume applies; ``CheckpointError`` naming the others when there are any.

    Args:
        saved, now: the checkpoint's description and the resuming run's (``canonical.describe``).
        path: the checkpoint file, for the message.
    """
    found = differences([flat(saved), flat(now)])
    refused = [(key, values) for key, values in found if not _may_change(key, saved, now)]
    if refused:
        lines = [f'{label(key)}: {old} → {new}' for key, (old, new) in refused]
        raise CheckpointError(f"Expected the pipeline, config and run arguments of the checkpoint {path!r} "
                              "(checkpoint → now). Received a different run:\n  " + '\n  '.join(lines) +
                              "\nResume with the same pipeline, config and arguments (only n_epochs, n_iters, the "
                              "optimizer's hyper-parameters, the models' placement, checkpoint_activations and "
                              "pipeline stages and the number of processes may change), or start afresh without "
                              "resume=.")
    return [(key, old, new) for key, (old, new) in found if key[0] != 'config']


def _may_change(key: tuple, saved: dict, now: dict) -> bool:
    if key[0] == 'run':
        return key[1] in RUN_LIMITS + RUN_LAYOUT
    if key[0] == 'model':
        return key[1] in saved['models'] and key[1] in now['models'] and _model_key_may_change(key[2])
    if key[0] == 'config':
        if key[1].rsplit('/', 1)[-1] == 'device':    # a job's ranks may each name their own, the agreement allows it
            return True
        places = _readers(key[1], saved) | _readers(key[1], now)
        return bool(places) and all(place[0] == 'model' and _model_key_may_change(place[2]) for place in places)
    return False


def _model_key_may_change(path: str) -> bool:
    parts = path.split('/')
    return path in PLACEMENT or (len(parts) == 2 and parts[0] == 'optimizer' and parts[1] != 'name')


def _readers(path: str, description: dict) -> set[tuple]:
    """Where the named expressions of a description read the config key ``path`` (or a key above or below it)."""
    found = set()
    for key, places in description['reads'].items():
        if key == '*' or key == path or path.startswith(key + '/') or key.startswith(path + '/'):
            found |= {tuple(place) for place in places}
    return found


def warn_changes(changes: list[Change], path: str) -> None:
    """One warning per change a resume applies."""
    for key, old, new in changes:
        warnings.warn(f"flowpipe: resuming from {path!r} with {label(key)}: {old} → {new}; the new value applies.",
                      UserWarning, stacklevel=4)


def model_overrides(changes: list[Change], pipeline: Any) -> dict[str, dict[str, Any]]:
    """``{model: {key path: new value}}`` of the changed model keys, to build the restored models with (the
    optimizer's options then still need ``apply_optimizer_changes``: loading the saved state brings back the old);
    a placement key the resumed run no longer gives is ``None``, so the saved config's value does not come back."""
    values = model_configs(pipeline)
    found: dict[str, dict[str, Any]] = {}
    for key, _, _ in changes:
        if key[0] != 'model':
            continue
        if key[2] in values.get(key[1], {}):
            found.setdefault(key[1], {})[key[2]] = values[key[1]][key[2]]
        elif key[2] in PLACEMENT:
            found.setdefault(key[1], {})[key[2]] = None
    return found


def apply_optimizer_changes(changes: list[Change], pipeline: Any, models: Any) -> None:
    """Set the changed optimizer hyper-parameters in the restored models' parameter groups."""
    values = model_configs(pipeline)
    for key, old, _ in changes:
        if key[0] != 'model' or not key[2].startswith('optimizer/'):
            continue
        name, option = key[1], key[2].split('/', 1)[1]
        model = models.get(name)
        optimizer = getattr(model, 'optimizer', None)
        if optimizer is None:
            continue                                # not built yet: it is built with the new config
        if option not in optimizer.param_groups[0]:
            raise CheckpointError(f"Expected an optimizer option of {type(optimizer).__name__} to change on resume. "
                                  f"Received: model {name!r} optimizer/{option}, which its parameter groups do not "
                                  f"have ({sorted(optimizer.param_groups[0])}). Resume with the checkpoint's value.")
        new = values[name][key[2]]
        if option == 'lr':
            _scale_lr(model, optimizer, _number(old), new)
        else:
            for group in optimizer.param_groups:
                group[option] = new


def _scale_lr(model: Any, optimizer: Any, old: float | None, new: float) -> None:
    """The restored learning rates times new/old (each set to ``new`` when old is not a positive number), with
    the schedules' base rates, so that a schedule keeps its progress."""
    def scaled(value: float) -> float:
        return value * new / old if old else new
    for group in optimizer.param_groups:
        group['lr'] = scaled(group['lr'])
        if 'initial_lr' in group:
            group['initial_lr'] = scaled(group['initial_lr'])
    decay = getattr(model, 'decay', None)
    for schedule in getattr(decay, 'schedules', None) or []:
        scheduler = schedule.scheduler
        if hasattr(scheduler, 'base_lrs'):
            scheduler.base_lrs = [scaled(value) for value in scheduler.base_lrs]
        if hasattr(scheduler, '_last_lr'):
            scheduler._last_lr = [group['lr'] for group in optimizer.param_groups]


def _number(text: str) -> float | None:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
