"""One canonical description of a run: what a checkpoint's fingerprint holds and what the ranks of a job compare.

``describe(pipeline, args, world_size)`` is a JSON-able dict of texts (``canonical_values.text``: whole values,
never cut, the same in every process):

- ``run``: the run arguments that decide the batches (``batch_size``, ``shuffle``, ``n_epochs``, ``n_iters``,
  ``drop_last``, ``seed``, the index's own keywords) and the number of processes;
- ``dataset``: its class, item count and a checksum of its ids, and what a dataset with ``data_text()`` says of its
  data (``TokenWindows``: its tokens, as ``canonical_values.text`` describes an array, and its windows);
- ``config``: the pipeline's config, one entry per key path (``'optimizer/lr'``);
- ``models``: the config of each model ``init_model`` declares, one entry per key path, nested keys included,
  evaluated: a named expression that can be read before the first batch (made of ``C`` and ``D`` only, such as
  ``C('lr')`` or ``C('units') * 2``) is its value, any other (``B.x.shape``) its own text;
- ``actions``: every action with all its arguments (``init_model`` without its config, which ``models`` holds);
- ``reads``: which config keys the named expressions read, and where (an action, or a model's key path).

``digest`` is a checksum of the whole description; ``flat`` and ``differences`` name what differs between two.
"""
from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping
from typing import Any

from ..expr.base import AttrExpr, BinaryExpr, Expression, ItemExpr, UnaryExpr, contains_expressions, evaluate
from ..expr.context import Context
from ..expr.named import ConfigExpr, DatasetExpr
from ..expr.roots import Root
from ..pipeline.records import MaybeRecord
from .canonical_values import text

__all__ = ['describe', 'differences', 'digest', 'flat', 'label', 'model_configs']

#: what ``differences`` shows for a key one side does not have
NOT_GIVEN = '(not given)'
_ORDER = {'run': 0, 'dataset': 1, 'config': 2, 'model': 3, 'actions': 4, 'action': 5}
_AT_START = (ConfigExpr, DatasetExpr, AttrExpr, ItemExpr, BinaryExpr, UnaryExpr)


def describe(pipeline: Any, args: Any, world_size: int = 1) -> dict[str, Any]:
    """The canonical description of running ``pipeline`` with ``args`` on ``world_size`` processes."""
    index = pipeline.dataset.index
    ids = index.indices
    data = ids.tobytes() if ids.dtype.kind in 'iuf' else repr(ids.tolist()).encode()
    run = {'batch_size': args.batch_size, 'shuffle': args.shuffle, 'n_epochs': args.n_epochs,
           'n_iters': args.n_iters, 'drop_last': args.drop_last, 'seed': args.seed, 'world_size': world_size,
           **({'whole_epochs': True} if args.whole_epochs else {}), **dict(args.extra)}
    reads: dict[str, set] = {}
    records = pipeline.all_records()
    for record in _flat(records):
        for key in _config_reads(record.args) | _config_reads(_described_kwargs(record)):
            reads.setdefault(key, set()).add(('actions',))
    models = {}
    for name, config in model_configs(pipeline, declared=True).items():
        models[name] = {}
        for path, value in config.items():
            for key in _config_reads(value):
                reads.setdefault(key, set()).add(('model', name, path))
            models[name][path] = text(_at_start(value, pipeline))
    return {'run': {key: text(value) for key, value in run.items()},
            'dataset': f'{type(pipeline.dataset).__name__} of {len(ids)} items (ids crc32 {zlib.crc32(data)})'
                       + _data_text(pipeline.dataset),
            'config': {path: text(value) for path, value in _paths(pipeline.config).items()},
            'models': models, 'actions': [_action_text(record) for record in records],
            'reads': {key: sorted(list(place) for place in places) for key, places in sorted(reads.items())}}


def _data_text(dataset: Any) -> str:
    """What a dataset says of its data beyond its ids (``data_text()``: a token dataset's tokens), or nothing."""
    own = getattr(dataset, 'data_text', None)
    return f'; {own()}' if callable(own) else ''


def digest(description: dict[str, Any]) -> str:
    """A checksum of a description: equal descriptions have equal digests, in every process."""
    return hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest()


def model_configs(pipeline: Any, declared: bool = False) -> dict[str, dict[str, Any]]:
    """``{model name: {key path: value}}`` of the models ``init_model`` declares: the values read before the first
    batch where they can be (``declared=True``: as declared, named expressions unevaluated)."""
    configs: dict[str, dict[str, Any]] = {}
    for record in _flat(pipeline.all_records()):
        if record.name != 'init_model' or record.kwargs.get('name') in configs:
            continue                                # the first init_model of a name is the one that runs
        config = record.kwargs.get('config')
        if isinstance(config, Expression):
            config = _at_start(config, pipeline)
        paths = _paths(config) if isinstance(config, Mapping) else {'': config}
        configs[record.kwargs['name']] = paths if declared else {
            path: _at_start(value, pipeline) for path, value in paths.items()}
    return configs


def flat(description: dict[str, Any]) -> dict[tuple, str]:
    """``{key: text}`` of a description; keys ``('run', name)``, ``('dataset',)``, ``('config', path)``,
    ``('model', name, path)``, ``('actions',)`` (their number) and ``('action', position)``."""
    items: dict[tuple, str] = {('run', name): value for name, value in description['run'].items()}
    items[('dataset',)] = description['dataset']
    items.update({('config', path): value for path, value in description['config'].items()})
    for name, config in description['models'].items():
        items.update({('model', name, path): value for path, value in config.items()})
    items[('actions',)] = str(len(description['actions']))
    items.update({('action', position): value for position, value in enumerate(description['actions'])})
    return items


def label(key: tuple) -> str:
    """How a message names a key of ``flat``."""
    kind = key[0]
    if kind == 'run':
        return key[1]
    if kind == 'config':
        return f'config {key[1]}'
    if kind == 'model':
        return f'model {key[1]!r} ' + (key[2] or 'config')
    return {'dataset': 'dataset', 'actions': 'number of actions'}.get(kind, f'action #{key[-1]}')


def differences(every: list[dict[tuple, str]]) -> list[tuple[tuple, list[str]]]:
    """``(key, [text of each description])`` for each key of ``flat`` descriptions on which they differ, in
    order (run arguments, dataset, config, models, actions); of the actions, only the first that differs."""
    keys = sorted(set().union(*every), key=lambda key: (_ORDER[key[0]], tuple(map(str, key[1:]))))
    found = []
    for key in keys:
        values = [items.get(key, '(none)' if key[0] == 'action' else NOT_GIVEN) for items in every]
        if len(set(values)) < 2:
            continue
        if key[0] == 'action' and any(other[0] == 'action' for other, _ in found):
            continue
        found.append((key, values))
    return found


def _flat(records: tuple) -> list:
    found = []
    for record in records:
        found.extend(_flat(record.actions) if isinstance(record, MaybeRecord) else [record])
    return found


def _described_kwargs(record: Any) -> dict:
    """An action's keyword arguments as described: ``init_model``'s without the config (``models`` holds it)."""
    kwargs = dict(record.kwargs)
    if record.name == 'init_model':
        kwargs.pop('config', None)
        kwargs.pop('static', None)
    return kwargs


def _action_text(record: Any) -> str:
    if isinstance(record, MaybeRecord):
        return f"({', '.join(_action_text(inner) for inner in record.actions)}) @ {text(record.prob)}"
    kwargs = _described_kwargs(record)
    if record.use_lock is not None:
        kwargs['use_lock'] = record.use_lock
    parts = [text(arg) for arg in record.args] + [f'{key}={text(value)}' for key, value in kwargs.items()]
    return f"{record.name}({', '.join(parts)})"


def _paths(config: Any, prefix: str = '') -> dict[str, Any]:
    """``{'a/b': value}`` of a nested config (``'a/b'`` keys and nested dicts alike); a ``device_map`` is a value."""
    found: dict[str, Any] = {}
    for key, value in (config or {}).items():
        path = f"{prefix}/{key if isinstance(key, str) else text(key)}".strip('/')
        if isinstance(value, Mapping) and value and path.rsplit('/', 1)[-1] != 'device_map':
            found.update(_paths(value, path))
        else:
            found[path] = value
    return found


def _at_start(value: Any, pipeline: Any) -> Any:
    """``value`` with its named expressions evaluated when they can be before the first batch (``C``, ``D``)."""
    if not contains_expressions(value) or not _readable_at_start(value):
        return value
    try:
        return evaluate(value, Context(dataset=pipeline.dataset, config=pipeline.config))
    except Exception:  # noqa: BLE001 - a key missing before the run: the expression stands for itself
        return value


def _readable_at_start(value: Any) -> bool:
    if isinstance(value, Root):
        return repr(value) in ('C', 'D')
    if isinstance(value, Expression):
        return isinstance(value, _AT_START) and all(_readable_at_start(part) for part in _slots(value))
    if isinstance(value, Mapping):
        return all(_readable_at_start(key) and _readable_at_start(item) for key, item in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_readable_at_start(item) for item in value)
    return True


def _config_reads(value: Any) -> set[str]:
    """The config keys the named expressions in ``value`` read; ``'*'`` for the whole config or an unknown key."""
    if isinstance(value, Root):
        return {'*'} if repr(value) == 'C' else set()
    if isinstance(value, Expression):
        found = set()
        if isinstance(value, ConfigExpr):
            found.add(value.expr_name if isinstance(value.expr_name, str) else '*')
        for part in _slots(value):
            found |= _config_reads(part)
        return found
    if isinstance(value, Mapping):
        return set().union(set(), *(_config_reads(key) | _config_reads(item) for key, item in value.items()))
    if isinstance(value, (list, tuple, set, frozenset)):
        return set().union(set(), *(_config_reads(item) for item in value))
    return set()


def _slots(expr: Expression) -> list:
    return [getattr(expr, slot, None) for klass in type(expr).__mro__ for slot in getattr(klass, '__slots__', ())]
