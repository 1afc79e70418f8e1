"""``Network``: the parts named by a config's ``order`` (``initial_block``, ``body``, ``head`` by default), each
made from its section by its ``type``, chained; every part reads its sizes from the previous part's output."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from ..layers.shapes import as_example, run_example
from .modules import DecoderModule, DefaultModule, EncoderModule, MLPDecoderModule

__all__ = ['DEFAULT_ORDER', 'PART_TYPES', 'Network', 'make_part']

DEFAULT_ORDER = ('initial_block', 'body', 'head')
#: a section's ``type`` -> the class that makes the part
PART_TYPES: dict[str, type] = {'default': DefaultModule, 'wrapper': DefaultModule, 'encoder': EncoderModule,
                               'decoder': DecoderModule, 'mlp-decoder': MLPDecoderModule,
                               'mlpdecoder': MLPDecoderModule}
#: batchflow's part types that load networks of other libraries (and their weights), which flowpipe does not
_NOT_MADE = ('timm', 'hugging-face', 'huggingface', 'hf')
#: section keys that flowpipe's model reads, not the part
_MODEL_KEYS = ('inputs',)


def make_part(inputs: Any, section: Any, name: str = 'part') -> nn.Module | None:
    """The part made from one section: an ``nn.Module`` as it is, a dict by its ``type`` (``'default'``,
    ``'encoder'``, ``'decoder'``, ``'mlp-decoder'`` or a class taking ``inputs=``); ``None`` for an empty section."""
    if isinstance(section, nn.Module):
        return section
    if not isinstance(section, Mapping):
        raise TypeError(f"Expected the section {name!r} as a dict of parameters or an nn.Module. Received: "
                        f"{type(section).__name__} {section!r}.")
    params = {key: value for key, value in section.items() if key not in _MODEL_KEYS}
    if not params:
        return None
    kind = params.pop('type', 'default')
    if callable(kind):
        return kind(inputs=inputs, **params)
    kind = str(kind).lower()
    if kind in ('default', 'wrapper') and not any(params.get(key) for key in ('layout', 'base_block', 'module')):
        raise ValueError(f"Expected a 'layout' (or 'base_block', 'module', 'type') in the section {name!r}. Received: "
                         f"{name}={dict(section)!r}, parameters of no layer. Add e.g. 'layout': 'cna', or give "
                         "'model': an nn.Module, or use a ready network class that reads these options.")
    if kind in _NOT_MADE:
        raise ValueError(f"Expected a part type flowpipe makes {sorted(PART_TYPES)}. Received: type={kind!r} in "
                         f"{name!r}: flowpipe does not load networks of timm or Hugging Face. Make the network "
                         f"with that library (timm.create_model(...), transformers' from_pretrained(...)) and give "
                         f"it as the section {name!r} (an nn.Module) or as 'model'.")
    if kind not in PART_TYPES:
        raise ValueError(f"Expected a part type among {sorted(PART_TYPES)} or a class. Received: type={kind!r} in "
                         f"{name!r}.")
    return PART_TYPES[kind](inputs=inputs, **params)


class Network(nn.Module):
    """Parts chained in ``order``, each made from its section (with ``common``'s parameters under it).

    Args:
        inputs: an example input (a tensor, or a shape with the batch axis).
        config: ``order`` (names of the sections, ``('initial_block', 'body', 'head')`` by default), the sections
            and ``common``.

    The parts are children named after their sections (``network.body``), so a ``device_map`` can place them.
    """

    def __init__(self, inputs: Any = None, config: Mapping | None = None):
        super().__init__()
        config = dict(config or {})
        order = config.get('order') or DEFAULT_ORDER
        if isinstance(order, str) or not all(isinstance(name, str) for name in order):
            raise TypeError(f"Expected 'order' as a list of section names. Received: order={order!r}.")
        common = config.get('common') or {}
        x: Any = as_example(inputs)
        self.order: list[str] = []
        for name in order:
            if name in ('order', 'common') or name in dict(nn.Module.__dict__):
                raise ValueError(f"Expected section names in 'order'. Received: {name!r}, a reserved name.")
            section = config.get(name)
            if section is None:
                continue
            if isinstance(section, Mapping) and section and not isinstance(section, nn.Module):
                section = {**common, **section}
            part = make_part(x, section, name)
            if part is None:
                continue
            x = run_example(part, x)
            self.add_module(name, part)
            self.order.append(name)
        self.output_shape = tuple(x.shape[1:]) if hasattr(x, 'shape') else None

    def forward(self, x: Any) -> Any:
        for name in self.order:
            x = getattr(self, name)(x)
        return x
