"""How a step calls the network and what it takes as the prediction: networks that return more than their
prediction (nanoGPT's ``(logits, loss)``, a Hugging Face ``ModelOutput``, a dict) and networks that take their
inputs by name (``input_ids=``, ``attention_mask=``, ``labels=``).

- ``'output'`` in the config: batchflow's output names (``'proba'``, ``'labels'``... ``inputs.OUTPUTS``) as before;
  any other name (not a near miss of one of those, which is refused as a typo) is the *field* of the network's
  return that is the prediction: ``'output': 'logits'`` (a key of a mapping or an attribute). Without a field, a
  model whose loss is a torch loss (``'loss': 'ce'``) takes the first element of a tuple or list, or the
  ``logits`` of a mapping or object; a model with a loss of its own gets the return as it is.
- ``'keyword_inputs': True``: the network inputs go to the network by keyword, each under its config name
  (``'inputs/attention_mask/shape'`` becomes ``attention_mask=``), instead of positionally.

The network's own loss, if it returns one, is left aside: the step's loss is the config's, normalized over the
whole batch on every layout (``docs/language_models.md``). ``NetworkCall`` wraps each replica's forward of the
engine (``adapt_forwards``); the pipeline-stage engine, which runs the network as stages, does not take them.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Callable

import torch

from .inputs import OUTPUTS, check_output

__all__ = ['NetworkCall', 'adapt_forwards', 'prediction', 'read_output']


def read_output(value: Any) -> tuple[tuple[str, ...], str | None]:
    """``(batchflow's output names, the prediction's field)`` of a config's ``'output'`` (see the module
    docstring)."""
    if (isinstance(value, str) and value not in OUTPUTS and value.isidentifier()
            and not difflib.get_close_matches(value, OUTPUTS, n=1, cutoff=0.8)):
        return (), value
    return check_output(value), None


def prediction(returned: Any, field: str | None) -> Any:
    """The prediction in what a network ``returned`` (see the module docstring); a tensor is its own."""
    if field is None:
        if isinstance(returned, torch.Tensor):
            return returned
        if isinstance(returned, (tuple, list)) and returned:
            return returned[0]
        field = 'logits'
    try:
        if isinstance(returned, Mapping):
            return returned[field]
        return getattr(returned, field)
    except (KeyError, AttributeError):
        fields = list(returned) if isinstance(returned, Mapping) else [
            name for name in dir(returned) if not name.startswith('_')]
        close = difflib.get_close_matches(field, [str(name) for name in fields], n=3)
        shown = f' (it has {close})' if close else ''
        raise ValueError(f"Expected the network's return to hold its prediction at {field!r}. Received: "
                         f"{type(returned).__name__}{shown}. Set 'output' in the model config to the field "
                         f"(a key or attribute name) of the prediction, e.g. 'output': 'logits'") from None


class NetworkCall:
    """A replica's forward called with a step's inputs (by keyword under ``names``, positionally for ``None``),
    returning the prediction (``prediction``; ``pick`` ``False``: the return as it is)."""

    __slots__ = ('forward', 'names', 'field', 'pick')

    def __init__(self, forward: Callable, names: tuple[str, ...] | None, field: str | None, pick: bool):
        self.forward, self.names, self.field, self.pick = forward, names, field, pick

    def __call__(self, *inputs: Any) -> Any:
        returned = self.forward(**dict(zip(self.names, inputs))) if self.names else self.forward(*inputs)
        if not self.pick or (self.field is None and type(returned) is torch.Tensor):
            return returned
        return prediction(returned, self.field)

    def __getattr__(self, name: str) -> Any:        # the forward's own attributes (a compiled module's)
        if name in NetworkCall.__slots__:
            raise AttributeError(name)
        return getattr(self.forward, name)


def adapt_forwards(engine: Any, input_names: tuple[str, ...], keyword_inputs: Any, field: str | None,
                   torch_loss: bool) -> None:
    """Wrap ``engine.forwards`` in ``NetworkCall``-s where the config asks (``keyword_inputs``, a ``field``) or
    the loss is a torch loss (which takes one tensor); left as they are otherwise."""
    if not isinstance(keyword_inputs, bool):
        raise TypeError(f"Expected 'keyword_inputs' as True or False. Received: {keyword_inputs!r}")
    forwards = getattr(engine, 'forwards', None)
    if forwards is None or not (keyword_inputs or field is not None or torch_loss):
        return
    names = input_names if keyword_inputs else None
    engine.forwards = [NetworkCall(forward, names, field, field is not None or torch_loss) for forward in forwards]
