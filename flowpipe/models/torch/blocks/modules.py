"""Network parts (a section of the model config each): ``DefaultModule`` (one block), ``EncoderModule`` (stages
that shrink the spatial size and keep their skips), ``DecoderModule`` (stages that grow it and join the skips),
``MLPDecoderModule`` (every tensor of a list brought to one size, joined and mixed by a block).

An encoder's and a decoder's stage parts are their direct children, named after the letter and the stage
(``block0``, ``skip0``, ``downsample0``; ``upsample0``, ``combine0``), so each is a block of its own to whatever
walks the network's children (``sharding_units=None`` makes each of a ``body``'s stage parts a sharding unit, or
each repeated block of a stage, ``docs/distributed.md``).

A part passes either one tensor or a list of tensors on: an encoder gives the list of its skips and its last
output (``output_type='list'``), a module with ``input_type='list'`` reads the item ``input_index`` of a list
(and with ``output_type='list'`` appends its output to it), a decoder reads the list's last tensor and its skips.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from ..config import merge_nested as merged
from ..layers.combine import Combine
from ..layers.multilayer import unpack
from ..layers.shapes import as_example, remember_output, run_example
from .core import Block, DefaultBlock, Downsample, Upsample

__all__ = ['DecoderModule', 'DefaultModule', 'EncoderModule', 'MLPDecoderModule']


def _one(inputs: Any, index: int) -> Any:
    return inputs[index] if isinstance(inputs, list) else inputs


def _letters(order: Any, allowed: str, part: str) -> str:
    letters = order if isinstance(order, str) else ''.join(str(item)[0] for item in order)
    for letter in letters:
        if letter not in allowed:
            raise ValueError(f"Expected the {part}'s order as letters (or words starting with them) among "
                             f"{allowed!r}. Received: order={order!r}.")
    return letters


_WORDS = {'s': 'skip', 'b': 'block', 'd': 'downsample', 'p': 'downsample', 'u': 'upsample', 'c': 'combine'}


class _Stages(nn.Module):
    """A part whose stage parts are its direct children, in the order they run (``stages``)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[str, int, str]] = []      # (letter, stage, child name), in order

    def add_stage_part(self, letter: str, stage: int, part: nn.Module) -> None:
        """Register ``part`` as the child ``<word><stage>`` (a suffix where ``order`` repeats a letter)."""
        name = base = f'{_WORDS[letter]}{stage}'
        while name in self._modules:
            name = f'{base}_{len(self.steps)}'
        self.add_module(name, part)
        self.steps.append((letter, stage, name))

    @property
    def stages(self) -> list[nn.Module]:
        """The stage parts in the order they run."""
        return [self._modules[name] for _, _, name in self.steps]

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        """Files written while the stage parts were one list keep them under ``stages.<index>``: renamed to
        their children's names first, so those files still load."""
        for index, (_, _, name) in enumerate(self.steps):
            old = f'{prefix}stages.{index}.'
            for key in [key for key in state_dict if key.startswith(old)]:
                state_dict[f'{prefix}{name}.{key[len(old):]}'] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args)


class DefaultModule(nn.Module):
    """One block (``Block``'s parameters: a ``layout``...), or ``module``: an ``nn.Module`` used as it is or a
    class made with the other parameters; ``disable_at_inference`` skips it in evaluation mode."""

    def __init__(self, inputs: Any = None, input_type: str = 'tensor', output_type: str = 'tensor',
                 input_index: int = -1, disable_at_inference: bool = False, module: Any = None, **kwargs: Any):
        super().__init__()
        if isinstance(inputs, list) and input_type != 'list':
            raise TypeError("Expected one tensor into a part without input_type='list'. Received: a list (the "
                            "previous part is an encoder, whose output_type is 'list'). Set input_type='list'.")
        self.input_type, self.output_type, self.input_index = input_type, output_type, input_index
        self.disable_at_inference = disable_at_inference
        example = as_example(_one(inputs, input_index))
        if isinstance(module, nn.Module):
            self.block: nn.Module = module
        elif module is not None:
            self.block = module(inputs=example, **kwargs)
        else:
            self.block = Block(inputs=example, **kwargs)
        output = run_example(self.block, example)
        if output_type == 'list':
            output = [*inputs, output] if isinstance(inputs, list) else [output]
        remember_output(self, inputs, output)

    def forward(self, inputs: Any) -> Any:
        tensor = _one(inputs, self.input_index)
        output = tensor if self.disable_at_inference and not self.training else self.block(tensor)
        if self.output_type == 'list':
            return [*inputs, output] if isinstance(inputs, list) else [output]
        return output


class EncoderModule(_Stages):
    """``num_stages`` stages, each the letters of ``order``: ``'s'`` keeps a skip (``skip``'s branch on the
    tensor), ``'b'`` a block (``blocks``), ``'d'``/``'p'`` a downsampling (``downsample``); list parameters inside
    ``blocks``, ``downsample`` and ``skip`` give one item per stage. Outputs the skips and the last tensor
    (``output_type='list'``) or the last tensor."""

    DEFAULTS: dict = {'order': ('skip', 'block', 'downsampling'), 'skip': {}, 'blocks': {'base_block': DefaultBlock},
                      'downsample': {'layout': 'p', 'pool_size': 2, 'pool_stride': 2}}

    def __init__(self, inputs: Any = None, num_stages: int | None = None, output_type: str = 'list',
                 input_index: int = -1, **kwargs: Any):
        super().__init__()
        if not isinstance(num_stages, int) or num_stages < 1:
            raise ValueError(f"Expected the encoder's num_stages as a positive int. Received: num_stages="
                             f"{num_stages!r}.")
        config = merged(self.DEFAULTS, kwargs)
        self.order = _letters(config.pop('order'), 'sbdp', 'encoder')
        self.output_type, self.input_index = output_type, input_index
        sections = {'s': config.pop('skip'), 'b': config.pop('blocks'), 'd': config.pop('downsample')}
        sections['p'] = sections['d']
        x = as_example(_one(inputs, input_index))
        skips = []
        for stage in range(num_stages):
            for letter in self.order:
                args = unpack(sections[letter], stage, num_stages)
                if letter == 's':
                    part: nn.Module = Block(inputs=x, **args) if args else nn.Identity()
                    skips.append(run_example(part, x))
                else:
                    part = (Block if letter == 'b' else Downsample)(inputs=x, **{**config, **args})
                    x = run_example(part, x)
                self.add_stage_part(letter, stage, part)
        remember_output(self, inputs, [*skips, x] if output_type == 'list' else x)

    def forward(self, inputs: Any) -> Any:
        x = _one(inputs, self.input_index)
        skips = []
        for letter, _, name in self.steps:
            part = self._modules[name]
            if letter == 's':
                skips.append(part(x))
            else:
                x = part(x)
        return [*skips, x] if self.output_type == 'list' else x


class DecoderModule(_Stages):
    """``num_stages`` stages (by default two fewer than the tensors it gets), each the letters of ``order``:
    ``'u'`` an upsampling (``upsample``), ``'b'`` a block (``blocks``), ``'c'`` a join (``combine``: ``op``,
    ``leading_index``) with the skip ``indices[stage]`` of the input list (by default the third from the end,
    then the earlier ones), unless ``skip`` is ``False``; list parameters give one item per stage."""

    DEFAULTS: dict = {'order': ('upsampling', 'block', 'combine'), 'blocks': {'base_block': DefaultBlock},
                      'upsample': {'layout': 'b', 'factor': 2}, 'combine': {'op': 'concat', 'leading_index': 1}}

    def __init__(self, inputs: Any = None, num_stages: int | None = None, skip: bool = True,
                 indices: Sequence[int] | None = None, **kwargs: Any):
        super().__init__()
        tensors = [as_example(item) for item in (inputs if isinstance(inputs, list) else [inputs])]
        self.indices = list(indices) if indices is not None else list(range(-3, -len(tensors) - 1, -1))
        num_stages = num_stages or len(tensors) - 2
        if not isinstance(num_stages, int) or num_stages < 1:
            raise ValueError(f"Expected the decoder's num_stages as a positive int (or an encoder's list before it). "
                             f"Received: num_stages={num_stages!r} for {len(tensors)} input tensor(s).")
        config = merged(self.DEFAULTS, kwargs)
        self.order = _letters(config.pop('order'), 'ubc', 'decoder')
        self.skip = skip
        sections = {'u': config.pop('upsample'), 'b': config.pop('blocks'), 'c': config.pop('combine')}
        x = tensors[-1]
        for stage in range(num_stages):
            for letter in self.order:
                args = unpack(sections[letter], stage, num_stages)
                if letter == 'c':
                    if not self._joins(stage, len(tensors)):
                        continue
                    pair = [tensors[self.indices[stage]], x]
                    part: nn.Module = Combine(inputs=pair, **args)
                    x = run_example(part, pair)
                else:
                    part = (Upsample if letter == 'u' else Block)(inputs=x, **{**config, **args})
                    x = run_example(part, x)
                self.add_stage_part(letter, stage, part)
        remember_output(self, inputs, x)

    def _joins(self, stage: int, count: int) -> bool:
        return bool(self.skip) and stage < len(self.indices) and -count <= self.indices[stage] < count

    def forward(self, inputs: Any) -> torch.Tensor:
        tensors = inputs if isinstance(inputs, list) else [inputs]
        x = tensors[-1]
        for letter, stage, name in self.steps:
            part = self._modules[name]
            if letter == 'c':
                x = part([tensors[self.indices[stage]], x])
            else:
                x = part(x)
        return x


class MLPDecoderModule(nn.Module):
    """batchflow's ``'mlp-decoder'`` part (SegFormer's decoder): each input tensor (one, or every item of a list
    such as an encoder's skips and last output) is brought to ``size`` by its upsampling (``upsample``: by default a
    3x3 convolution keeping its channels, then a bilinear resize to ``size``), the results are joined (``combine``:
    a concatenation along channels) and pass through ``block`` (by default ``DefaultBlock``: ``'cna'``, the same
    channels); one tensor out.

    Args:
        inputs: an example tensor or list of tensors.
        size: the output's spatial size; by default the first input's.
        upsample: parameters of every upsampling (``Upsample``); a list inside gives one item per input.
        combine: parameters of the join (``Combine``: ``op``, ``leading_index``).
        block: parameters of the block after the join (``Block``).
        **kwargs: parameters of every upsampling and of the block (``common``'s).
    """

    DEFAULTS: dict = {'upsample': {'layout': 'cb', 'channels': 'same'}, 'combine': {'op': 'concat'},
                      'block': {'base_block': DefaultBlock}}

    def __init__(self, inputs: Any = None, size: Sequence[int] | None = None, upsample: dict | None = None,
                 combine: dict | None = None, block: dict | None = None, **kwargs: Any):
        super().__init__()
        tensors = [as_example(item) for item in (inputs if isinstance(inputs, list) else [inputs])]
        self.size = tuple(int(side) for side in (size if size is not None else tensors[0].shape[2:]))
        upsample = merged(self.DEFAULTS['upsample'], upsample or {})
        resized = []
        for index, tensor in enumerate(tensors):
            part = Upsample(inputs=tensor, **{**kwargs, **unpack(upsample, index, len(tensors)), 'shape': self.size})
            self.add_module(f'upsample{index}', part)
            resized.append(run_example(part, tensor))
        self.count = len(tensors)
        self.combine = Combine(inputs=resized, **merged(self.DEFAULTS['combine'], combine or {}))
        joined = run_example(self.combine, resized)
        self.block = Block(inputs=joined, **{**kwargs, **merged(self.DEFAULTS['block'], block or {})})
        remember_output(self, inputs, run_example(self.block, joined))

    def forward(self, inputs: Any) -> torch.Tensor:
        tensors = inputs if isinstance(inputs, list) else [inputs]
        if len(tensors) != self.count:
            raise ValueError(f"Expected {self.count} tensor(s) into the mlp-decoder, as when it was built. Received: "
                             f"{len(tensors)}. Build the network on inputs of the same structure.")
        resized = [self._modules[f'upsample{index}'](tensor) for index, tensor in enumerate(tensors)]
        return self.block(self.combine(resized))
