"""``MultiLayer``: a chain of layers written as a layout string, one letter a layer (batchflow's config language).

``MultiLayer(inputs=x, layout='cna cna p', channels=[16, 32], kernel_size=3)`` makes conv-norm-activation twice
and a max pooling. Spaces (and parentheses) only help reading. A parameter given as a *list* at least as long as
the number of letters of its group gives one item to each of them in turn (``channels=[16, 32]`` above: the two
``c``); any other value (an int, a tuple such as ``kernel_size=(3, 1)``, a shorter list) goes to all of them. A
parameter named after a layer (``conv={'bias': True}``, ``normalization={'momentum': 0.01}``, ``branch={...}``)
goes to the letters of that layer only. ``LETTERS`` is the table (and ``docs/models.md`` shows it); the letters of
batchflow 0.10.1 that flowpipe does not make are refused by name (``REFUSED_LETTERS``).
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .combine import Branch, Combine, SelfAttention
from .conv import Conv, ConvTranspose, DepthwiseConv, DepthwiseConvTranspose, SeparableConv, SeparableConvTranspose
from .core import Activation, AlphaDropout, Dense, Dropout, Normalization
from .pooling import AvgPool, GlobalAvgPool, GlobalMaxPool, MaxPool
from .resize import IncreaseDim, Interpolate, PixelShuffle, PixelUnshuffle, Reshape
from .shapes import as_example, remember_output, run_example

__all__ = ['ALIASES', 'LETTERS', 'REFUSED_LETTERS', 'Letter', 'MultiLayer', 'unpack']


@dataclass(frozen=True)
class Letter:
    """One layout letter: the name of its layer (and of its own parameter dict), the class, and its group
    (letters of a group count together when a list parameter is spread over them)."""
    name: str
    layer: type
    group: str


LETTERS: dict[str, Letter] = {
    'a': Letter('activation_layer', Activation, 'a'),
    'f': Letter('dense', Dense, 'f'),
    'n': Letter('normalization', Normalization, 'n'),
    'd': Letter('dropout', Dropout, 'd'),
    'D': Letter('alpha_dropout', AlphaDropout, 'd'),
    'c': Letter('conv', Conv, 'c'),
    't': Letter('transposed_conv', ConvTranspose, 'c'),
    'C': Letter('separable_conv', SeparableConv, 'c'),
    'T': Letter('separable_conv_transpose', SeparableConvTranspose, 'c'),
    'w': Letter('depthwise_conv', DepthwiseConv, 'c'),
    'W': Letter('depthwise_conv_transpose', DepthwiseConvTranspose, 'c'),
    'p': Letter('max_pool', MaxPool, 'p'),
    'v': Letter('avg_pool', AvgPool, 'p'),
    'P': Letter('global_max_pool', GlobalMaxPool, 'P'),
    'V': Letter('global_avg_pool', GlobalAvgPool, 'P'),
    'b': Letter('resize_bilinear', Interpolate, 'b'),
    'X': Letter('pixel_shuffle', PixelShuffle, 'X'),
    'x': Letter('pixel_unshuffle', PixelUnshuffle, 'x'),
    '>': Letter('increase_dim', IncreaseDim, '>'),
    'r': Letter('reshape', Reshape, 'r'),
    'R': Letter('branch', Branch, 'R'),
    'B': Letter('branch', Branch, 'R'),
    '+': Letter('branch_end', Combine, '+'),
    '|': Letter('branch_end', Combine, '+'),
    '*': Letter('branch_end', Combine, '+'),
    'S': Letter('self_attention', SelfAttention, 'S'),
}
#: batchflow 0.10.1's letters that flowpipe does not make, and what to write instead
REFUSED_LETTERS = {
    'F': "dense along an axis: use 'f' with keep_dims", 'l': "use 'n' with normalization_type='layer'",
    'k': 'shared-kernel convolutions are not made', 'K': 'multi-kernel convolutions are not made',
    'q': "use 'v' then 'c' for a pooled convolution", 'Q': "use 't' (a transposed convolution)",
    'm': 'multi-scale convolutions are not made', 'y': 'deformable convolutions are not made',
    '!': "drop-path joins are not made: use '+'", 'H': 'Hamburger attention is not made',
}
#: letters of batchflow's earlier versions -> what to write now
_EARLIER = {'u': "an upsampling of batchflow's earlier versions: write 'b' (interpolation) or 't' (a transposed "
                 "convolution)", '.': "a concatenation of batchflow's earlier versions: write '|'"}
#: batchflow's other names of parameters -> the name the layers read
ALIASES = {'filters': 'channels', 'strides': 'stride', 'units': 'features', 'pool_strides': 'pool_stride',
           'dilation_rate': 'dilation', 'batch_norm': 'normalization'}
_FACTORS = {'b': 'scale_factor', 'X': 'upscale_factor', 'x': 'downscale_factor'}
_BRANCH_STARTS, _BRANCH_ENDS = 'RB', '+|*'


@functools.cache
def _parameters(layer: type) -> list[str]:
    return [name for name, parameter in inspect.signature(layer.__init__).parameters.items()
            if name not in ('self', 'inputs') and parameter.kind not in (parameter.VAR_KEYWORD,
                                                                          parameter.VAR_POSITIONAL)]


#: every parameter name a layer of the table reads, and the names of the layers' own dicts
KNOWN = frozenset({name for letter in LETTERS.values() for name in _parameters(letter.layer)}
                  | {letter.name for letter in LETTERS.values()} | set(ALIASES) | {'factor'})


def unpack(kwargs: dict, index: int, count: int) -> dict:
    """batchflow's spreading of list parameters: the ``index``-th item of a list at least ``count`` long, the
    value itself otherwise (dicts are spread inside)."""
    result = {}
    for key, value in kwargs.items():
        if isinstance(value, list) and len(value) >= count:
            value = value[index]
        elif isinstance(value, dict):
            value = unpack(value, index, count)
        result[key] = value
    return result


def parse_layout(layout: str) -> str:
    """The letters of ``layout`` without spaces and parentheses; an unknown or refused letter is a ``ValueError``."""
    if not isinstance(layout, str):
        raise TypeError(f"Expected a layout string such as 'cna p'. Received: layout={layout!r}.")
    letters = ''.join(char for char in layout if char not in ' ()')
    for char in letters:
        if char in REFUSED_LETTERS:
            raise ValueError(f"Expected layout letters flowpipe makes. Received: {char!r} in layout={layout!r}: "
                             f"{REFUSED_LETTERS[char]}.")
        if char not in LETTERS:
            hint = f' It is {_EARLIER[char]}.' if char in _EARLIER else ''
            raise ValueError(f"Expected layout letters among {''.join(LETTERS)!r}. Received: {char!r} in "
                             f"layout={layout!r}.{hint} See the table of letters in docs/models.md.")
    return letters


class MultiLayer(nn.Module):
    """Layers made from a layout string and their parameters (see the module docstring).

    Args:
        inputs: an example input (a tensor, or a shape with the batch axis) the layers read their sizes from.
        layout: the letters.
        **kwargs: the layers' parameters (``channels``, ``kernel_size``, ``stride``, ``padding``, ``activation``,
            ``dropout_rate``, ``pool_size``, ``features``... and batchflow's names ``filters``, ``strides``,
            ``units``, ``pool_strides``), lists spread over the letters, and dicts named after a layer.
    """

    def __init__(self, inputs: Any = None, layout: str = '', **kwargs: Any):
        super().__init__()
        self.layout = parse_layout(layout)
        self.kwargs = _canonical(kwargs)
        self.layers = nn.ModuleList()
        example = as_example(inputs)
        remember_output(self, example, self._build(example))

    def _build(self, x: Any) -> Any:
        totals: dict[str, int] = {}
        for char in self.layout:
            totals[LETTERS[char].group] = totals.get(LETTERS[char].group, 0) + 1
        seen: dict[str, int] = {}
        stored: list = []
        for char in self.layout:
            letter = LETTERS[char]
            index = seen[letter.group] = seen.get(letter.group, -1) + 1
            args = self._arguments(char, index, totals[letter.group])
            if char in _BRANCH_ENDS:
                if not stored:
                    raise ValueError(f"Expected a branch start ('R' or 'B') before {char!r}. Received: "
                                     f"layout={self.layout!r}.")
                pair = [stored.pop(), x]
                layer = Combine(inputs=pair, **args)
                x = run_example(layer, pair)
            else:
                layer = letter.layer(**args, **({'inputs': x} if _takes_inputs(letter.layer) else {}))
                if char in _BRANCH_STARTS:
                    stored.append(run_example(layer, x))
                else:
                    x = run_example(layer, x)
            self.layers.append(layer)
        return x

    def _arguments(self, char: str, index: int, count: int) -> dict:
        letter = LETTERS[char]
        names = _parameters(letter.layer)
        args = {name: self.kwargs[name] for name in names if name in self.kwargs}
        factor = _FACTORS.get(char)
        if factor and factor not in args and 'factor' in self.kwargs:
            args[factor] = self.kwargs['factor']
        own = self.kwargs.get(letter.name) or {}
        if not isinstance(own, dict):
            raise TypeError(f"Expected {letter.name!r} as a dict of parameters of the layout letter {char!r}. "
                            f"Received: {letter.name}={own!r}.")
        args = unpack({**args, **own}, index, count)
        if char in _BRANCH_ENDS:
            args['op'] = own.get('op', char)      # the letter says how to join, unless its own dict does
        if letter.layer is Dense and 'features' not in args:
            raise ValueError("Expected 'features' (or 'units') for the layout letter 'f', the outputs of the dense "
                             f"layer. Received: none in layout={self.layout!r}.")
        return args

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stored: list[torch.Tensor] = []
        for char, layer in zip(self.layout, self.layers):
            if char in _BRANCH_STARTS:
                stored.append(layer(x))
            elif char in _BRANCH_ENDS:
                x = layer([stored.pop(), x])
            else:
                x = layer(x)
        return x

    def extra_repr(self) -> str:
        return f'layout={self.layout!r}'


@functools.cache
def _takes_inputs(layer: type) -> bool:
    return 'inputs' in inspect.signature(layer.__init__).parameters


def _canonical(kwargs: dict) -> dict:
    """``kwargs`` with batchflow's other names replaced; an unknown name (a typo) is a ``ValueError``."""
    result = {}
    for key, value in kwargs.items():
        name = ALIASES.get(key, key)
        if name not in KNOWN:
            import difflib
            close = difflib.get_close_matches(key, sorted(KNOWN), n=3)
            raise ValueError(f"Expected layer parameters of the layout letters. Received: {key}={value!r}. "
                             f"{'Did you mean ' + repr(close) + '? ' if close else ''}See docs/models.md.")
        if name in result and name != key:
            raise ValueError(f"Expected {key!r} or {name!r} (the same parameter), not both. Received: both.")
        result[name] = value
    return result
