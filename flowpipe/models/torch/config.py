"""Turn a model config (a dict with ``'/'`` keys, a nested dict or a ``flowpipe.Config``) into one frozen spec.

Keys read here (everything else is kept for the network classes, e.g. ``body/filters``):

- ``inputs/<name>/shape``: shape of one item, channels first; ``inputs/<name>/classes``: the input is a target of
  integer labels and the head gets that many outputs.
- ``initial_block/inputs``: the input (or list of inputs) fed to the network; the other inputs are targets.
  Without it, the network's inputs are the declared inputs without ``classes``.
- ``loss``, ``optimizer``, ``decay``: see ``flowpipe.models.torch.losses``, ``.optimizers`` and ``.decay``.
- ``clip_grad_value``, ``clip_grad_norm``, ``gradient_clipping``: see ``flowpipe.models.torch.clipping``
  (``TorchModel`` checks them, the engine clips).
- ``callbacks``: batchflow's model callbacks, called after every training step (``flowpipe.models.torch.callbacks``).
- the placement keys of ``flowpipe.plan_keys.PLACEMENT_KEYS`` (``device``, ``microbatch``, ``device_weights``,
  ``device_map``, ``amp``, ``memory_format``, ``compile``, ``pin_memory``, ``sharding*``, ``randomness``,
  ``pipeline*``): passed to ``flowpipe.parallel`` (sharding: ``flowpipe.parallel.sharding``; randomness:
  ``flowpipe.parallel.item_random``; pipeline: ``flowpipe.parallel.stages``).
- ``model``: a ready ``nn.Module`` (or a class / zero-argument callable that makes one).
- ``output``, ``keyword_inputs``: which field of the network's return is the prediction, and whether the inputs go
  by keyword (``flowpipe.models.torch.outputs``).
- ``profile``: time every training step per torch operation (``TorchModel.show_profile_info``).
- ``nonfinite_loss``: what a nan or inf training loss does (``flowpipe.models.torch.checks``).
- ``sam_rho``, ``sam_individual_norm``: sharpness-aware minimization (``flowpipe.parallel.engines.sam``).
- ``weights_averaging`` (or ``wa``, ``swa``): weight averaging (``flowpipe.models.torch.averaging``).
- ``checkpoint_activations``: modules whose activations backward recomputes (``flowpipe.models.torch.checkpointing``).

Every top-level key flowpipe reads is in ``TOP_KEYS`` (add a key there when code starts reading it). A key close to
a known one is an error naming it; another unknown key is reported by ``unknown_keys`` (``TorchModel`` warns, unless
the model class lists the key in its ``config_keys``).

batchflow's keys are read as their flowpipe equivalents: ``microbatch_size`` is ``microbatch``, ``channels_last``
is ``memory_format='channels_last'``, ``inputs_shapes`` (or ``input_shapes``) is ``inputs/images/shape``,
``classes`` is ``inputs/labels/classes`` and, without ``classes``, ``targets_shapes`` (or ``target_shapes``) is
``inputs/targets/shape`` (each when the config declares no such input). batchflow's keys that flowpipe does not
read are refused by ``flowpipe.models.torch.batchflow_keys``.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ...plan_keys import PLACEMENT_KEYS

__all__ = ['TOP_KEYS', 'ModelSpec', 'as_dtype', 'flat_paths', 'get_path', 'merge_nested', 'nest', 'parse_config',
           'unknown_keys']

#: The top-level model config keys flowpipe reads, in one place: a key read by new code is added here.
#: The placement keys come from ``flowpipe.plan_keys`` (the one list the plan's readers share).
TOP_KEYS = tuple(sorted({'batch_norm', 'benchmark', 'body', 'callbacks', 'checkpoint_activations', 'clip_grad_norm',
                         'clip_grad_value', 'common', 'decay', 'dtype', 'gradient_clipping', 'head', 'init_weights',
                         'initial_block', 'inputs', 'keyword_inputs', 'loss', 'model', 'name', 'nonfinite_loss', 'optimizer', 'order',
                         'output', 'placeholder_batch_size', 'profile', 'sam_individual_norm', 'sam_rho', 'swa',
                         'trainable', 'wa', 'weights_averaging', *PLACEMENT_KEYS}))
#: Where a few keys that are often put at the top level belong.
_KEY_HINTS = {'lr': "the learning rate goes in the optimizer: 'optimizer': {'name': 'Adam', 'lr': 0.001}",
              'learning_rate': "the learning rate goes in the optimizer: 'optimizer': {'name': 'Adam', 'lr': 0.001}",
              'batch_size': 'the batch size is an argument of run(batch_size, ...)',
              'epochs': 'epochs are an argument of run(..., n_epochs=...)',
              'n_epochs': 'epochs are an argument of run(..., n_epochs=...)'}


def nest(config: Mapping | None) -> dict:
    """A nested plain dict from a mapping whose keys may be ``'a/b'`` paths (later keys merge into earlier)."""
    result: dict = {}
    for key, value in (config or {}).items():
        if not isinstance(key, str):
            raise TypeError(f"Expected string keys in a model config. Received: key={key!r}. "
                            "Use names such as 'inputs/images/shape'.")
        *parents, leaf = key.strip('/').split('/')
        node = result
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"Expected {part!r} to be a section of the model config. Received: a value "
                                 f"{node!r} and the key {key!r}. Remove one of them.")
        if isinstance(value, Mapping) and not _is_leaf_mapping(leaf):
            value = nest(value)
            if isinstance(node.get(leaf), dict):
                value = merge_nested(node[leaf], value)
        node[leaf] = value
    return result


def _is_leaf_mapping(key: str) -> bool:
    # A device_map maps module names to devices: its keys may contain dots or slashes of their own.
    return key == 'device_map'


def merge_nested(base: dict, update: dict) -> dict:
    """``update`` over ``base``, nested dicts merged key by key (neither is changed)."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            value = merge_nested(merged[key], value)
        merged[key] = value
    return merged


def get_path(config: Mapping, path: str, default: Any = None) -> Any:
    """The value at ``'a/b/c'`` in a nested dict, or ``default``."""
    node: Any = config
    for part in path.split('/'):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


@dataclass(frozen=True)
class ModelSpec:
    """What a ``TorchModel`` needs from its config, validated once.

    Attributes:
        config: the whole config as a nested dict.
        input_names: names of the network's inputs, in the order the network takes them.
        target_names: names of the targets, in the order the loss takes them.
        shapes: shape of one item per declared input (missing for inputs declared without a shape).
        classes: number of classes per target that has them.
    """
    config: dict
    input_names: tuple[str, ...] = ()
    target_names: tuple[str, ...] = ()
    shapes: dict = field(default_factory=dict)
    classes: dict = field(default_factory=dict)

    def get(self, path: str, default: Any = None) -> Any:
        """The config value at ``path`` (``'body/filters'``), or ``default``."""
        return get_path(self.config, path, default)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one item of the (first) network input; raises a ``ValueError`` naming the key to set."""
        name = self.input_names[0] if self.input_names else 'images'
        if name not in self.shapes:
            raise ValueError(f"Expected the shape of one item of the network input {name!r} to build the network. "
                             f"Received: no 'inputs/{name}/shape' in the model config. "
                             f"Add e.g. 'inputs/{name}/shape': B.image_shape (channels first).")
        return self.shapes[name]

    @property
    def num_outputs(self) -> int:
        """Outputs of the head: the classes of the first target, else the size of its shape."""
        for name in self.target_names:
            if name in self.classes:
                return self.classes[name]
            if name in self.shapes:
                return int(_prod(self.shapes[name]))
        raise ValueError("Expected a target with classes to size the network's head. Received: targets "
                         f"{list(self.target_names)!r} without 'classes' or 'shape'. "
                         "Add e.g. 'inputs/labels/classes': D.num_classes.")


def _prod(shape: tuple[int, ...]) -> int:
    result = 1
    for size in shape:
        result *= size
    return result


def parse_config(config: Mapping | None) -> ModelSpec:
    """Validate a model config and find the network inputs, targets, shapes and classes."""
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"Expected a model config as a dict or flowpipe.Config. Received: {type(config).__name__} "
                        f"{config!r}. Pass e.g. {{'inputs/images/shape': (3, 32, 32)}}.")
    nested = _from_batchflow(nest(config))
    _check_top_keys(nested)
    declared = nested.get('inputs') or {}
    if not isinstance(declared, Mapping):
        raise TypeError(f"Expected 'inputs' to map input names to their description. Received: {declared!r}. "
                        "Use e.g. 'inputs/images/shape': (3, 32, 32).")
    shapes, classes = {}, {}
    for name, description in declared.items():
        description = description if isinstance(description, Mapping) else {}
        if description.get('shape') is not None:
            shapes[name] = _check_shape(name, description['shape'])
        if description.get('classes') is not None:
            classes[name] = _check_classes(name, description['classes'])
    input_names = _network_inputs(nested, declared, classes)
    target_names = tuple(name for name in declared if name not in input_names)
    return ModelSpec(nested, input_names, target_names, shapes, classes)


def _from_batchflow(nested: dict) -> dict:
    """``nested`` with batchflow's key names replaced by flowpipe's (see the module docstring)."""
    aliases = [key for key in _ALIASES if key in nested]
    if not aliases:
        return nested
    nested = dict(nested)
    _same_key(nested, 'microbatch_size', 'microbatch', nested.pop('microbatch_size', None))
    if 'channels_last' in nested:
        layout = nested.pop('channels_last')
        if not isinstance(layout, bool):
            raise TypeError(f"Expected 'channels_last' as True or False. Received: {layout!r}.")
        _same_key(nested, 'channels_last', 'memory_format', 'channels_last' if layout else None)
    declared = {name: dict(value) if isinstance(value, Mapping) else value
                for name, value in (nested.get('inputs') or {}).items()}
    described = [value for value in declared.values() if isinstance(value, Mapping)]
    shape = _one_of(nested, 'inputs_shapes', 'input_shapes')
    if shape is not None:
        if not any(value.get('shape') is not None and value.get('classes') is None for value in described):
            declared.setdefault('images', {})['shape'] = shape
    target_shape = _one_of(nested, 'targets_shapes', 'target_shapes')
    if 'classes' in nested:
        classes = nested.pop('classes')
        if not any(value.get('classes') is not None for value in described):
            declared.setdefault('labels', {})['classes'] = classes
    elif target_shape is not None and not any(name not in ('images',) for name in declared):
        declared['targets'] = {'shape': target_shape}
        block = nested.get('initial_block')
        if block is None or isinstance(block, Mapping) and block.get('inputs') is None:
            nested['initial_block'] = {**(block or {}), 'inputs': tuple(name for name in declared if name != 'targets')}
    nested['inputs'] = declared
    return nested


#: batchflow's key names that ``_from_batchflow`` reads as flowpipe's.
_ALIASES = ('microbatch_size', 'channels_last', 'inputs_shapes', 'input_shapes', 'targets_shapes', 'target_shapes',
            'classes')


def _same_key(nested: dict, alias: str, key: str, value: Any) -> None:
    """Put ``value`` (given under batchflow's ``alias``) at ``key``; an error when both disagree."""
    if value is None:
        return
    if nested.get(key) not in (None, value):
        raise ValueError(f"Expected {key} or {alias} (the same setting), not both. Received: {key}="
                         f"{nested[key]!r}, {alias} meaning {value!r}.")
    nested[key] = value


def _one_of(nested: dict, *names: str) -> Any:
    """The value of the first of batchflow's spellings present (all of them removed); a list of several shapes
    (several inputs) is refused, flowpipe names each input."""
    values = [nested.pop(name) for name in names if name in nested]
    if not values or not values[0]:
        return None
    value = values[0]
    if isinstance(value[0], (tuple, list)):
        if len(value) > 1:
            raise ValueError(f"Expected one shape in {names[0]!r}. Received: {value!r}, shapes of several tensors. "
                             "Name each one: 'inputs/<name>/shape': shape.")
        value = value[0]
    return tuple(value)


def _check_top_keys(nested: dict) -> None:
    from .batchflow_keys import REFUSED     # batchflow's keys are refused there, with the reason
    sections = _sections(nested)
    for key in nested:
        if key not in TOP_KEYS and key not in _KEY_HINTS and key not in REFUSED and key not in sections:
            close = difflib.get_close_matches(key, TOP_KEYS, n=3)
            if close:
                raise ValueError(f"Expected known model config keys. Received: {key!r}. Did you mean {close}?")


def _sections(nested: Mapping) -> tuple:
    """The network sections a config's ``order`` names (``'encoder'``, ``'decoder'``...): read as parts."""
    order = nested.get('order')
    return tuple(order) if isinstance(order, (list, tuple)) else ()


def unknown_keys(spec: ModelSpec, own_keys: tuple[str, ...] = ()) -> dict[str, str]:
    """``{key: why}`` for each top-level key that neither flowpipe nor ``own_keys`` (a model class's) reads."""
    from .batchflow_keys import REFUSED     # checked there: a refused key's harmless value does nothing
    found = {}
    sections = _sections(spec.config)
    for key in spec.config:
        if key not in TOP_KEYS and key not in own_keys and key not in REFUSED and key not in sections:
            found[key] = _KEY_HINTS.get(key, 'no code reads it')
    return found


def _check_shape(name: str, shape: Any) -> tuple[int, ...]:
    try:
        return tuple(int(size) for size in shape)
    except (TypeError, ValueError):
        raise TypeError(f"Expected 'inputs/{name}/shape' as a tuple of ints (one item, channels first). "
                        f"Received: {shape!r}.") from None


def _check_classes(name: str, classes: Any) -> int:
    if isinstance(classes, (list, tuple)):
        classes = len(classes)
    if isinstance(classes, bool) or not isinstance(classes, int) and not hasattr(classes, '__index__'):
        raise TypeError(f"Expected 'inputs/{name}/classes' as a number of classes or a list of class names. "
                        f"Received: {classes!r}.")
    if int(classes) < 1:
        raise ValueError(f"Expected a positive number for 'inputs/{name}/classes'. Received: {classes!r}.")
    return int(classes)


def _network_inputs(nested: dict, declared: Mapping, classes: dict) -> tuple[str, ...]:
    chosen = get_path(nested, 'initial_block/inputs')
    if chosen is None:
        return tuple(name for name in declared if name not in classes)
    names = (chosen,) if isinstance(chosen, str) else tuple(chosen)
    unknown = [name for name in names if declared and name not in declared]
    if unknown:
        raise ValueError(f"Expected 'initial_block/inputs' to name declared inputs {list(declared)!r}. "
                         f"Received: {chosen!r}. Declare them under 'inputs/<name>/shape'.")
    return names


def flat_paths(config: Mapping, prefix: str = '') -> dict:
    """``{'a/b': value}`` for every leaf of a nested config (a ``device_map`` stays one value)."""
    flat = {}
    for key, value in config.items():
        path = f'{prefix}{key}'
        if isinstance(value, dict) and value and key != 'device_map':
            flat.update(flat_paths(value, path + '/'))
        else:
            flat[path] = value
    return flat


#: dtype names accepted by ``as_dtype`` -> the name of the torch dtype
DTYPES = {'float16': 'float16', 'bfloat16': 'bfloat16', 'float32': 'float32', 'float64': 'float64',
          'double': 'float64', 'float': 'float32'}


def as_dtype(dtype: Any) -> Any:
    """A torch dtype from a dtype or its name (``'float64'``, ``'torch.float64'``)."""
    import torch
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.replace('torch.', '') in DTYPES:
        return getattr(torch, DTYPES[dtype.replace('torch.', '')])
    raise ValueError(f"Expected 'dtype' as a torch dtype or one of {sorted(DTYPES)}. Received: dtype={dtype!r}.")
