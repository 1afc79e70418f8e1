"""The speed options of a plan: mixed precision (``amp``), ``memory_format``, ``compile`` and ``pin_memory``.

``make_plan`` checks each flag here, once, into the plain value the frozen plan keeps; ``build_engine`` applies
them to the module (:func:`resolve_memory_format`, :func:`compiled`); the engines apply them to every step
(``precision``, ``engines.tensors``). None of them changes what a step computes beyond float reordering (bfloat16
autocast: beyond bfloat16 rounding).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence

from .devices import LogicalDevice

if TYPE_CHECKING:
    import torch
    from torch import nn

    from .plan import DevicePlan

__all__ = ['AMP_DTYPES', 'MEMORY_FORMATS', 'check_amp', 'check_compile', 'check_memory_format', 'check_pin_memory',
           'compiled', 'describe_speed', 'resolve_memory_format', 'torch_memory_format']

#: accepted names of the autocast dtypes -> the plan's name
AMP_DTYPES = {'float16': 'float16', 'fp16': 'float16', 'half': 'float16',
              'bfloat16': 'bfloat16', 'bf16': 'bfloat16'}
#: accepted ``memory_format`` values -> the plan's value (``None``: inputs and weights as given)
MEMORY_FORMATS = {None: None, 'contiguous': None, 'channels_last': 'channels_last', 'auto': 'auto'}


def _has_cuda(devices: Sequence[LogicalDevice]) -> bool:
    return any(dev.device.type == 'cuda' for dev in devices)


def check_amp(amp: Any, devices: Sequence[LogicalDevice]) -> bool | str:
    """``amp`` as the plan's autocast dtype name, or ``False``.

    ``True`` is ``'float16'`` (with a gradient scaler) when a device is a GPU, else ``'bfloat16'`` (a CPU autocasts
    to bfloat16). ``'float16'`` needs a GPU.
    """
    if amp is None or amp is False:
        return False
    if amp is True:
        return 'float16' if _has_cuda(devices) else 'bfloat16'
    if not isinstance(amp, str):
        raise TypeError(f"Expected amp as a bool or a dtype name ('bfloat16', 'float16'). Received: {amp!r} of type "
                        f"{type(amp).__name__}.")
    name = AMP_DTYPES.get(amp.lower().replace('torch.', ''))
    if name is None:
        raise ValueError(f"Expected amp as True, False, 'bfloat16' or 'float16'. Received: amp={amp!r}.")
    if name == 'float16' and not _has_cuda(devices):
        raise ValueError(f"Expected a CUDA device for amp='float16' (float16 autocast and loss scaling are for "
                         f"GPUs). Received: amp={amp!r} on {[dev.name for dev in devices]}. Use amp='bfloat16' (or "
                         f"True) on a CPU.")
    return name


def check_memory_format(memory_format: Any) -> str | None:
    """``memory_format`` as the plan's value: ``'channels_last'``, ``'auto'`` or ``None`` (as given)."""
    key = memory_format
    if key is not None and not isinstance(key, str):
        key = str(key).replace('torch.', '')        # torch.channels_last, torch.contiguous_format
        key = 'contiguous' if key == 'contiguous_format' else key
    if key not in MEMORY_FORMATS:
        raise ValueError(f"Expected memory_format as 'channels_last', 'auto', 'contiguous' or None. Received: "
                         f"memory_format={memory_format!r}.")
    return MEMORY_FORMATS[key]


def check_compile(options: Any) -> tuple[tuple[str, Any], ...] | None:
    """``compile`` as sorted ``(name, value)`` pairs of ``torch.compile`` options, or ``None`` when off."""
    if options is None or options is False:
        return None
    if options is True:
        return ()
    if not isinstance(options, Mapping):
        raise TypeError(f"Expected compile as a bool or a dict of torch.compile options (e.g. {{'dynamic': True}}). "
                        f"Received: {options!r} of type {type(options).__name__}.")
    known = ('backend', 'dynamic', 'fullgraph', 'mode', 'options', 'disable')
    unknown = [key for key in options if key not in known]
    if unknown:
        raise ValueError(f"Expected torch.compile options among {list(known)}. Received: {sorted(map(str, unknown))}.")
    return tuple(sorted(options.items()))


def check_pin_memory(pin_memory: Any, devices: Sequence[LogicalDevice]) -> bool:
    """``'auto'`` is ``True`` when a device is a GPU; ``True`` without a GPU is an error."""
    if pin_memory == 'auto' or pin_memory is None:
        return _has_cuda(devices)
    if not isinstance(pin_memory, bool):
        raise TypeError(f"Expected pin_memory as True, False or 'auto'. Received: {pin_memory!r}.")
    if pin_memory and not _has_cuda(devices):
        raise ValueError(f"Expected a CUDA device for pin_memory=True (pinned memory speeds up copies to a GPU). "
                         f"Received: devices {[dev.name for dev in devices]}. Use pin_memory='auto' or False.")
    return pin_memory


def describe_speed(plan: DevicePlan) -> list[str]:
    """The plan's lines for precision, memory format and compilation (none when they are off)."""
    lines = []
    if plan.amp == 'float16':
        lines.append('  mixed precision: float16 autocast + one gradient scaler stepped once per batch')
    elif plan.amp:
        lines.append(f'  mixed precision: {plan.amp} autocast, no loss scaling')
    if plan.memory_format:
        lines.append(f'  memory format: {plan.memory_format} (weights once, 4-D inputs at every step)')
    if plan.compile is not None:
        options = ', '.join(f'{key}={value!r}' for key, value in plan.compile)
        lines.append(f'  compiled: torch.compile({options}), one compiled module per replica')
    return lines


def resolve_memory_format(plan: DevicePlan, module: nn.Module) -> str | None:
    """``plan.memory_format`` with ``'auto'`` decided: ``'channels_last'`` for a module with 2-D convolutions on a
    GPU under mixed precision (the layout tensor cores take), else ``None``.

    Not on a CPU: there oneDNN ran a small CNN about 1.3x faster channels-last but ResNet18 on 32x32 images slower
    (``docs/performance.md``), so no rule of the module alone chooses well; say ``'channels_last'`` explicitly.
    """
    if plan.memory_format != 'auto':
        return plan.memory_format
    from torch import nn
    convolutional = any(isinstance(layer, (nn.Conv2d, nn.ConvTranspose2d)) for layer in module.modules())
    on_gpu = plan.primary.device.type == 'cuda' and bool(plan.amp)
    return 'channels_last' if convolutional and on_gpu else None


def torch_memory_format(name: str | None) -> torch.memory_format | None:
    """The torch object of a resolved memory format name."""
    import torch
    return torch.channels_last if name == 'channels_last' else None


def compiled(module: nn.Module, options: tuple[tuple[str, Any], ...] | None) -> Any:
    """``torch.compile(module, **options)``, or ``module`` itself when ``options`` is ``None``.

    The compiled wrapper shares the module's parameters: the engine calls the wrapper and keeps the module for
    its state, gradients and optimizer.
    """
    if options is None:
        return module
    import torch
    return torch.compile(module, **dict(options))
