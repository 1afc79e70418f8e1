"""Layers of the letters ``f`` (dense), ``d``/``D`` (dropout), ``a`` (activation) and ``n`` (normalization)."""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .shapes import as_example, num_channels, num_spatial, resolve_channels

__all__ = ['Activation', 'AlphaDropout', 'Dense', 'Dropout', 'Flatten', 'Normalization']


class Flatten(nn.Module):
    """Flatten all axes but the batch axis and those in ``keep_dims`` (kept in front, in order).

    Args:
        keep_dims: an axis or axes to keep; axis 0 (the batch) is always kept.
    """

    def __init__(self, keep_dims: int | tuple[int, ...] = 0):
        super().__init__()
        dims = (keep_dims,) if isinstance(keep_dims, int) else tuple(keep_dims)
        self.keep_dims = sorted({0, *dims})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.keep_dims[-1] >= x.dim():
            raise ValueError(f"Expected an input with axis {self.keep_dims[-1]} to keep. Received: shape "
                             f"{tuple(x.shape)}, keep_dims={self.keep_dims}. Keep fewer axes.")
        if len(self.keep_dims) == x.dim():
            return x
        rest = [axis for axis in range(x.dim()) if axis not in self.keep_dims]
        x = x.permute(*self.keep_dims, *rest)
        return x.reshape(*x.shape[:len(self.keep_dims)], -1)


class Dense(nn.Module):
    """A linear layer on the flattened input (letter ``f``).

    Args:
        features: outputs, an int or an expression of ``'same'`` (the flattened inputs); batchflow's ``units``.
        inputs: an example input (tensor or shape).
        bias: learn an additive bias.
        flatten: flatten the input first (else the last axis is the features).
        keep_dims: axes kept when flattening (see ``Flatten``).
    """

    def __init__(self, features: int | str, inputs: Any = None, bias: bool = True, flatten: bool = True,
                 keep_dims: int | tuple[int, ...] = 0):
        super().__init__()
        self.flatten = Flatten(keep_dims) if flatten else nn.Identity()
        in_features = int(self.flatten(as_example(inputs)).shape[-1])
        self.linear = nn.Linear(in_features, resolve_channels(features, in_features, 'features'), bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.flatten(x))


class Dropout(nn.Module):
    """Dropout of whole channels on 1-3 spatial axes (``nn.Dropout1d/2d/3d``), of single values on a flat input.

    Args:
        inputs: an example input.
        dropout_rate: the fraction dropped.
    """

    _ALPHA = False

    def __init__(self, inputs: Any = None, dropout_rate: float = 0.0):
        super().__init__()
        example = as_example(inputs)
        if not 0 <= float(dropout_rate) < 1:
            raise ValueError(f"Expected dropout_rate in [0, 1). Received: dropout_rate={dropout_rate!r}.")
        if self._ALPHA or example.dim() <= 2:
            self.layer = (nn.AlphaDropout if self._ALPHA else nn.Dropout)(float(dropout_rate))
        else:
            self.layer = (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)[num_spatial(example, 'd') - 1](float(dropout_rate))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


class AlphaDropout(Dropout):
    """Alpha dropout, which keeps the mean and variance of SELU activations (letter ``D``)."""

    _ALPHA = True


def _named_activations() -> dict[str, type]:
    names = {name.lower(): getattr(nn, name) for name in nn.modules.activation.__all__}
    return {**names, 'swish': nn.SiLU, 'mish': nn.Mish, 'gelu': nn.GELU}


class Activation(nn.Module):
    """An activation (letter ``a``).

    Args:
        activation: a name of a ``torch.nn`` activation (any case: ``'relu'``, ``'GELU'``, ``'leakyrelu'``), an
            ``nn.Module``, a module class, a callable on tensors, or ``None`` (the identity).
        **kwargs: arguments of the activation class.
    """

    def __init__(self, activation: Any = 'relu', **kwargs: Any):
        super().__init__()
        self.function: Callable | None = None
        if activation is None:
            self.layer: nn.Module = nn.Identity()
        elif isinstance(activation, str):
            named = _named_activations()
            if activation.lower() not in named:
                raise ValueError(f"Expected an activation name of torch.nn (e.g. 'relu', 'gelu', 'silu'). Received: "
                                 f"activation={activation!r}. Pass an nn.Module or a callable for others.")
            self.layer = named[activation.lower()](**kwargs)
        elif isinstance(activation, nn.Module):
            self.layer = activation
        elif isinstance(activation, type) and issubclass(activation, nn.Module):
            self.layer = activation(**kwargs)
        elif callable(activation):
            self.layer, self.function = nn.Identity(), activation
        else:
            raise TypeError(f"Expected an activation as a name, an nn.Module, a module class or a callable. "
                            f"Received: activation={activation!r}.")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function(x) if self.function is not None else self.layer(x)


class Normalization(nn.Module):
    """Normalization over channels (letter ``n``).

    Args:
        inputs: an example input.
        normalization_type: ``'batch'`` (default), ``'instance'``, ``'group'`` (``num_groups``, default 32 or the
            channels when fewer), ``'layer'`` (over the channels and positions of each
            item: one group), or ``None``/``False``/``'none'``.
        **kwargs: arguments of the torch layer (``eps``, ``momentum``, ``affine``...).
    """

    def __init__(self, inputs: Any = None, normalization_type: str | None = 'batch', **kwargs: Any):
        super().__init__()
        example = as_example(inputs)
        channels = num_channels(example)
        kind = 'none' if normalization_type in (None, False) else normalization_type
        if kind == 'none':
            self.layer: nn.Module = nn.Identity()
        elif kind == 'batch':
            dims = max(example.dim() - 2, 1)
            self.layer = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)[dims - 1](channels, **kwargs)
        elif kind == 'instance':
            dims = num_spatial(example, 'n')
            self.layer = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)[dims - 1](channels, **kwargs)
        elif kind == 'group':
            groups = kwargs.pop('num_groups', min(32, channels))
            self.layer = nn.GroupNorm(groups, channels, **kwargs)
        elif kind == 'layer':
            self.layer = nn.GroupNorm(1, channels, **kwargs)
        else:
            raise ValueError(f"Expected normalization_type among 'batch', 'instance', 'group', 'layer', None. "
                             f"Received: normalization_type={normalization_type!r}.")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)
