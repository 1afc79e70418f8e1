"""Random calls inside a forward, drawn by item (``'randomness': 'by_item'``): a torch function mode per piece.

``item_random.ItemStreams`` gives torch's dropout *modules* a forward that draws by item. A forward may also call
random functions itself: ``F.dropout`` and its feature and alpha kinds, ``scaled_dot_product_attention`` with
``dropout_p > 0`` (a transformer's attention dropout), ``nn.MultiheadAttention`` (whose dropout is a call inside
``F.multi_head_attention_forward``). While a training piece runs, :class:`CallDraws` (a ``TorchFunctionMode``,
entered on the piece's thread) sees every torch function the forward calls and routes these to the by-item masks:

- ``F.dropout``, ``dropout1d/2d/3d``, ``alpha_dropout``, ``feature_alpha_dropout`` and ``torch.dropout`` (and
  their feature, alpha and in-place kinds) in training with ``p > 0``: the masks of ``item_random.item_dropout``,
  keyed by (step seed, the function's name, its call count in the piece's forward, item). The call count is the
  function's: every piece's forward makes the same calls in the same order, whatever the layout;
- ``scaled_dot_product_attention`` with ``dropout_p > 0``: the explicit attention path (scores, mask, softmax, the
  by-item mask on the ``(B, H, L, S)`` weights, times the values), the fused kernel otherwise. The explicit path
  rounds differently from a fused kernel, and every layout takes it alike;
- ``F.multi_head_attention_forward`` in training with dropout: its body runs with the mode still on, so its
  attention dropout (on ``(B * heads, L, S)`` weights, item-major) or its ``scaled_dot_product_attention`` call draws
  by item.

An input whose first axis is not the piece's items (a sequence-first tensor), and the random functions it does not
route (``torch.rand``, ``randn``, ``bernoulli``, ``Tensor.uniform_``, ``F.rrelu`` in training, ``gumbel_softmax``,
...), draw from torch's generator of the piece: the same only on the same layout. Each is said once per model (a
warning naming the function and the module whose forward called it) and the plan's randomness line names it
(``ItemStreams.uncovered``).

Activation checkpointing: the calls' draws join the module draws in the forward's ``DrawLog``; the recomputation
runs under :func:`replaying_calls`, which hands the recorded draws back in order (on autograd's device thread too).
"""
from __future__ import annotations

import contextlib
import math
import sys
import types
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from .item_random import Kind, _active_log, _Draw, _name_key, call_stream, item_dropout

if TYPE_CHECKING:
    from .item_random import ItemStreams, _Piece

__all__ = ['CallDraws', 'UNCOVERED', 'replaying_calls']

_ELEMENT, _FEATURE, _ALPHA, _FEATURE_ALPHA = Kind(False, False), Kind(True, False), Kind(False, True), Kind(True, True)
_F_NAMES, _TORCH_NAMES = ('input', 'p', 'training', 'inplace'), ('input', 'p', 'train')

#: function -> (its name, its kind, whether it works in place, its argument names, the default of ``training``)
_DROPOUTS: dict[Callable, tuple[str, Kind, bool | None, tuple[str, ...], bool]] = {
    F.dropout: ('F.dropout', _ELEMENT, None, _F_NAMES, True),
    F.dropout1d: ('F.dropout1d', Kind(True, False, (3,)), None, _F_NAMES, True),
    F.dropout2d: ('F.dropout2d', Kind(True, False, (3, 4)), None, _F_NAMES, True),
    F.dropout3d: ('F.dropout3d', Kind(True, False, (5,)), None, _F_NAMES, True),
    F.alpha_dropout: ('F.alpha_dropout', _ALPHA, None, _F_NAMES, False),
    F.feature_alpha_dropout: ('F.feature_alpha_dropout', _FEATURE_ALPHA, None, _F_NAMES, False),
    torch.dropout: ('torch.dropout', _ELEMENT, False, _TORCH_NAMES, True),
    torch.dropout_: ('torch.dropout_', _ELEMENT, True, _TORCH_NAMES, True),
    torch.feature_dropout: ('torch.feature_dropout', _FEATURE, False, _TORCH_NAMES, True),
    torch.feature_dropout_: ('torch.feature_dropout_', _FEATURE, True, _TORCH_NAMES, True),
    torch.alpha_dropout: ('torch.alpha_dropout', _ALPHA, False, _TORCH_NAMES, True),
    torch.alpha_dropout_: ('torch.alpha_dropout_', _ALPHA, True, _TORCH_NAMES, True),
    torch.feature_alpha_dropout: ('torch.feature_alpha_dropout', _FEATURE_ALPHA, False, _TORCH_NAMES, True),
    torch.feature_alpha_dropout_: ('torch.feature_alpha_dropout_', _FEATURE_ALPHA, True, _TORCH_NAMES, True),
}

#: random functions a forward may call that do not draw by item: function -> (name, index of ``training`` or None)
UNCOVERED: dict[Callable, tuple[str, int | None]] = {
    **{getattr(torch, name): (f'torch.{name}', None) for name in (
        'rand', 'rand_like', 'randn', 'randn_like', 'randint', 'randint_like', 'randperm', 'bernoulli', 'normal',
        'poisson', 'multinomial')},
    **{getattr(torch.Tensor, name): (f'Tensor.{name}', None) for name in (
        'bernoulli', 'bernoulli_', 'uniform_', 'normal_', 'random_', 'exponential_', 'geometric_', 'cauchy_',
        'log_normal_', 'multinomial')},
    F.rrelu: ('F.rrelu', 3), F.rrelu_: ('F.rrelu_', 3), torch.rrelu: ('torch.rrelu', 3),
    torch.rrelu_: ('torch.rrelu_', 3), F.gumbel_softmax: ('F.gumbel_softmax', None),
}

_SDPA_NAMES = ('query', 'key', 'value', 'attn_mask', 'dropout_p', 'is_causal', 'scale', 'enable_gqa')
_SDPA_DEFAULTS = (None, None, None, None, 0.0, False, None, False)
_MHA = F.multi_head_attention_forward


def _open_mha() -> Callable:
    """``F.multi_head_attention_forward``'s body without its own dispatch check, so that a function mode sees the
    calls it makes (a mode is off while it handles a call; this copy's check says no mode, torch's is left as is)."""
    scope = {**vars(F), 'has_torch_function': lambda *args: False}
    body = types.FunctionType(_MHA.__code__, scope, _MHA.__name__, _MHA.__defaults__, _MHA.__closure__)
    body.__kwdefaults__ = _MHA.__kwdefaults__
    return body


_OPEN_MHA = _open_mha()
_MHA_NAMES = tuple(_MHA.__code__.co_varnames[:_MHA.__code__.co_argcount + _MHA.__code__.co_kwonlyargcount])


_ROUTED = frozenset([*_DROPOUTS, *UNCOVERED, F.scaled_dot_product_attention, _MHA])


def _arguments(args: tuple, kwargs: dict, names: tuple[str, ...], defaults: tuple) -> list[Any]:
    values = dict(zip(names, args))
    values.update(kwargs)
    return [values.get(name, default) for name, default in zip(names, defaults)]


class CallDraws(TorchFunctionMode):
    """The mode of one replica's pieces (``piece`` its current one; ``None``: a recomputation, which only replays the
    draws its first forward recorded)."""

    def __init__(self, streams: 'ItemStreams | None', piece: '_Piece | None', replica: int = 0):
        super().__init__()
        self.streams, self.piece, self.replica = streams, piece, replica
        self.heads = 1          # inside multi-head attention: its weights hold ``heads`` rows per item

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        try:
            routed = func in _ROUTED
        except TypeError:       # an unhashable callable: none of these
            routed = False
        if not routed:          # the fast path: every other call of the forward
            return func(*args, **(kwargs or {}))
        if self.streams is not None:
            self.streams.calls_seen = True      # a random call: the forward keeps being watched
        kwargs = kwargs or {}
        dropout = _DROPOUTS.get(func)
        uncovered = None if dropout is not None else UNCOVERED.get(func)
        if dropout is not None:
            return self._dropout(func, args, kwargs, *dropout)
        if func is F.scaled_dot_product_attention:
            return self._attention(func, args, kwargs)
        if func is _MHA:
            return self._multi_head(func, args, kwargs)
        if uncovered is not None and self.streams is not None and self.piece is not None:
            name, training = uncovered
            if training is None or _arguments(args, kwargs, ('input', 'lower', 'upper', 'training'),
                                              (None, None, None, False))[3]:
                self.streams.uncovered_call(name, self.replica, None)
        return func(*args, **kwargs)

    def _dropout(self, func: Callable, args: tuple, kwargs: dict, name: str, kind: Kind, inplace: bool | None,
                 names: tuple[str, ...], training: bool) -> Any:
        values = _arguments(args, kwargs, names, (None, 0.5, training, False))
        input, p, train = values[0], float(values[1]), bool(values[2])  # noqa: A001 - torch's name
        in_place = bool(values[3]) if inplace is None else inplace
        if not train or p == 0 or (self.piece is not None and self.piece.quiet):
            return func(*args, **kwargs)
        draw = self._draw(name, input, kind)
        if draw is None:
            return func(*args, **kwargs)
        if p == 1 or self.heads == 1 or kind.feature:
            return item_dropout(input, p, in_place, kind, draw.stream, draw.start)
        items = input.shape[0] // self.heads       # (items * heads, ...), item-major: one row block per item
        out = item_dropout(input.reshape(items, -1), p, False, kind, draw.stream, draw.start).reshape(input.shape)
        return input.copy_(out) if in_place else out

    def _attention(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        query, key, value, mask, dropout_p, causal, scale, gqa = _arguments(args, kwargs, _SDPA_NAMES, _SDPA_DEFAULTS)
        if not dropout_p:
            return func(*args, **kwargs)
        draw = self._draw('scaled_dot_product_attention', query, _ELEMENT, heads=1)
        if draw is None:
            return func(*args, **kwargs)
        return explicit_attention(query, key, value, mask, float(dropout_p), causal, scale, gqa, draw)

    def _multi_head(self, func: Callable, args: tuple, kwargs: dict) -> Any:
        values = dict(zip(_MHA_NAMES, args), **kwargs)
        if not values.get('training', True) or not values.get('dropout_p'):
            return func(*args, **kwargs)
        heads, self.heads = self.heads, int(values['num_heads'])
        try:
            with self:          # the body's calls come back to this mode
                return _OPEN_MHA(*args, **kwargs)
        finally:
            self.heads = heads

    def _draw(self, name: str, input: torch.Tensor, kind: Kind, heads: int | None = None) -> _Draw | None:  # noqa: A002
        """The draw of a new call (recorded for a checkpointed forward), or the recorded one of a recomputation;
        ``None``: torch's own draw (an input that does not hold the piece's items first, said once)."""
        log = _active_log()
        if log is not None and log.replay:
            return log.next()
        piece = self.piece
        if piece is None or piece.size is None:
            return None
        key = _name_key(name)
        call = piece.calls.get(key, 0)
        piece.calls[key] = call + 1
        heads = self.heads if heads is None else heads
        draw = None
        if input.dim() >= (2 if kind.feature else 1) and input.shape[0] == piece.size * heads and (
                kind.dims is None or input.dim() in kind.dims) and not (kind.feature and heads != 1):
            draw = _Draw(call_stream(piece.seed, key, call), piece.start)
        elif self.streams is not None:
            self.streams.uncovered_call(name, self.replica, tuple(input.shape))
        if log is not None:
            log.draws.append(draw)
        return draw


def explicit_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                       dropout_p: float, causal: bool, scale: float | None, gqa: bool, draw: _Draw) -> torch.Tensor:
    """``scaled_dot_product_attention`` written out, its attention weights dropped by item with ``draw``'s masks."""
    if gqa and key.shape[-3] != query.shape[-3]:
        repeat = query.shape[-3] // key.shape[-3]
        key, value = key.repeat_interleave(repeat, -3), value.repeat_interleave(repeat, -3)
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query @ key.transpose(-2, -1) * scale
    if causal:
        allowed = torch.ones(query.shape[-2], key.shape[-2], dtype=torch.bool, device=query.device).tril()
        scores = scores.masked_fill(~allowed, float('-inf'))
    if mask is not None:
        scores = scores.masked_fill(~mask, float('-inf')) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores, dim=-1)
    weights = item_dropout(weights, dropout_p, False, _ELEMENT, draw.stream, draw.start)
    return weights @ value


@contextlib.contextmanager
def replaying_calls() -> Iterator[None]:
    """The context of a recomputation: the random calls take the draws the first forward recorded."""
    with CallDraws(None, None):
        yield


def caller_module(root: nn.Module) -> str | None:
    """The qualified name in ``root`` of the innermost module whose ``forward`` is on the stack (``None``: none)."""
    names = {id(module): name for name, module in root.named_modules()}
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get('self')
        if isinstance(owner, nn.Module) and id(owner) in names:
            return names[id(owner)]
        frame = frame.f_back
    return None
