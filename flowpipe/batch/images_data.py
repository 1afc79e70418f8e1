"""How image actions see a component: torch groups of equal-shaped images, whatever the component holds.

A component holds numpy arrays or torch tensors: one array ``(N, H, W, C)`` (channels-last, grayscale
``(N, H, W)`` too) or ``(N, C, H, W)`` (channels-first), or, when shapes differ, a 1-D object array of single
images in that layout. ``read`` turns it into ``(positions, tensor)`` groups of equal shape, dtype and device,
each tensor ``(n, C, H, W)`` whatever its memory layout (a channels-last array becomes a permuted view, not a
copy). ``write`` turns result groups back into the component's kind (numpy or torch) and layout.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ['Groups', 'cast_rounded', 'chunk_items', 'chunked', 'is_ragged', 'on_chosen', 'put', 'read', 'stacked',
           'take', 'write']


@dataclass(frozen=True)
class Groups:
    """A component read for an action.

    Attributes:
        size: the number of items.
        groups: ``(positions, tensor)`` pairs; ``tensor`` is ``(len(positions), C, H, W)``.
        as_torch: the component held torch tensors (results are written back as tensors).
    """
    size: int
    groups: list
    as_torch: bool


def is_ragged(value: Any) -> bool:
    """Whether a component value is a sequence of single images rather than one array or tensor."""
    if isinstance(value, torch.Tensor):
        return False
    return not isinstance(value, np.ndarray) or value.dtype == object


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    if any(stride < 0 for stride in array.strides):
        array = np.ascontiguousarray(array)
    if not array.flags.writeable:
        with warnings.catch_warnings():  # read-only stores: flowpipe never writes into its inputs
            warnings.simplefilter('ignore', UserWarning)
            return torch.from_numpy(array)
    return torch.from_numpy(array)


def _as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    array = np.asarray(value)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise TypeError(f"Expected images as numeric numpy arrays or torch tensors. Received: an array of dtype "
                        f"{array.dtype}. Convert the images to uint8 or float first.")
    return _from_numpy(array)


def _nchw(tensor: torch.Tensor, channels_first: bool, items: bool, name: str) -> torch.Tensor:
    """A view ``(N, C, H, W)`` of a stacked component, or ``(C, H, W)`` of one item (``items=False``)."""
    ndim = tensor.ndim + (0 if items else 1)
    if ndim == 3 and not channels_first:
        tensor = tensor.unsqueeze(-1)
    elif ndim != 4:
        layout = '(N, C, H, W)' if channels_first else '(N, H, W) or (N, H, W, C)'
        what = f"shape={tuple(tensor.shape)!r}" if items else f"an item of shape {tuple(tensor.shape)!r}"
        raise ValueError(f"Expected images of shape {layout} in component {name!r}. Received: {what}. Reshape "
                         f"them, or use a component of images.")
    if channels_first:
        return tensor
    return tensor.permute(0, 3, 1, 2) if items else tensor.permute(2, 0, 1)


def read(value: Any, channels_first: bool, name: str = 'images') -> Groups:
    """Group a component's images by shape, dtype and device, as ``(n, C, H, W)`` tensors."""
    if not is_ragged(value):
        tensor = _nchw(_as_tensor(value), channels_first, True, name)
        return Groups(len(tensor), [(np.arange(len(tensor)), tensor)], isinstance(value, torch.Tensor))
    items = [_nchw(_as_tensor(item), channels_first, False, name) for item in value]
    found: dict[tuple, list[int]] = {}
    for position, item in enumerate(items):
        found.setdefault((tuple(item.shape), item.dtype, item.device), []).append(position)
    groups = [(np.array(positions), _group([items[i] for i in positions], channels_first))
              for positions in found.values()]
    as_torch = bool(items) and all(isinstance(item, torch.Tensor) for item in value)
    return Groups(len(items), groups, as_torch)


def _group(items: list[torch.Tensor], channels_first: bool) -> torch.Tensor:
    """Equal-shaped ``(C, H, W)`` views as one ``(n, C, H, W)`` tensor, in the items' own layout.

    Channels-last items are stacked as ``(H, W, C)`` (a plain copy of each, none for a single item) and viewed
    as ``(n, C, H, W)`` with channels-last strides: torch's ``stack`` of the permuted views would transpose every
    image into a channels-first copy, and kernels such as ``interpolate`` run several times faster on uint8
    images in channels-last memory (and give the same values).
    """
    if channels_first:
        return items[0].unsqueeze(0) if len(items) == 1 else torch.stack(items)
    hwc = [item.permute(1, 2, 0) for item in items]
    return (hwc[0].unsqueeze(0) if len(hwc) == 1 else torch.stack(hwc)).permute(0, 3, 1, 2)


def _layout_of(tensor: torch.Tensor) -> torch.memory_format:
    if tensor.ndim == 4 and tensor.shape[1] > 1 and tensor.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format


def take(tensor: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
    """``tensor[rows]``: whole items, copied one by one on the CPU, where an image is one block of memory.

    torch's index kernels move images tens of times slower than plain copies of each (17 ms against 0.3 ms
    for 32 of 64 uint8 images of 224x224x3); on other devices one index call is the fast way.
    """
    rows = np.asarray(rows, dtype=np.int64)
    if tensor.device.type != 'cpu':
        return tensor[torch.as_tensor(rows, device=tensor.device)]
    if len(rows) and np.array_equal(rows, np.arange(rows[0], rows[0] + len(rows))):
        return tensor[int(rows[0]):int(rows[0]) + len(rows)]
    out = torch.empty((len(rows), *tensor.shape[1:]), dtype=tensor.dtype, memory_format=_layout_of(tensor))
    for k, row in enumerate(rows.tolist()):
        out[k] = tensor[row]
    return out


def put(out: torch.Tensor, rows: np.ndarray, values: torch.Tensor) -> None:
    """``out[rows] = values``, item by item on the CPU (see ``take``)."""
    rows = np.asarray(rows, dtype=np.int64)
    if out.device.type != 'cpu':
        out[torch.as_tensor(rows, device=out.device)] = values
        return
    for k, row in enumerate(rows.tolist()):
        out[row] = values[k]


def stacked(results: list, size: int) -> torch.Tensor | None:
    """One ``(size, C, H, W)`` tensor of result groups in batch order, or ``None`` when they cannot stack."""
    if len(results) == 1 and len(results[0][0]) == size:
        positions, tensor = results[0]
        if np.array_equal(positions, np.arange(size)):
            return tensor
        return take(tensor, np.argsort(positions))
    first = results[0][1] if results else None
    if first is None or any(t.shape[1:] != first.shape[1:] or t.dtype != first.dtype or t.device != first.device
                            for _, t in results):
        return None
    out = torch.empty((size, *first.shape[1:]), dtype=first.dtype, device=first.device,
                      memory_format=_layout_of(first))
    for positions, tensor in results:
        put(out, positions, tensor)
    return out


def _layout(tensor: torch.Tensor, channels_first: bool, items: bool) -> torch.Tensor:
    if channels_first:
        return tensor.contiguous()
    if items:
        return tensor.permute(1, 2, 0).contiguous()
    # A channels-last result is usually laid out NHWC already (torch's channels_last format): no copy then.
    return tensor.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1)


def _kind(tensor: torch.Tensor, as_torch: bool) -> Any:
    return tensor if as_torch else tensor.numpy(force=True)


def write(results: list, like: Groups, channels_first: bool) -> Any:
    """Make a component value of result groups: the kind (numpy or torch) of ``like``, in the given layout.

    Results of one shape, dtype and device stack into one array; others give a 1-D object array of images.
    """
    whole = stacked(results, like.size) if results else None
    if whole is not None:
        return _kind(_layout(whole, channels_first, False), like.as_torch)
    items: list[Any] = [None] * like.size
    for positions, tensor in results:
        for position, item in zip(positions, tensor):
            items[position] = _kind(_layout(item, channels_first, True), like.as_torch)
    packed = np.empty(like.size, dtype=object)
    for position, item in enumerate(items):
        packed[position] = item
    return packed


def cast_rounded(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Float ``values``, already rounded and clipped to the integer ``dtype``'s range, converted to ``dtype``.

    On the CPU the conversion goes through numpy, whose cast is several times faster than torch's own
    float-to-integer copy (1.1 against 6.6 ms for 9.6 million float32 values to uint8 on one thread); the values
    are whole numbers in range, so both give the same result.
    """
    if values.device.type != 'cpu' or values.dtype not in (torch.float32, torch.float64) or values.requires_grad:
        return values.to(dtype)
    return torch.from_numpy(values.numpy().astype(torch.empty((), dtype=dtype).numpy().dtype))


_CHUNK_BYTES = 1 << 21   # CPU kernels take about 2 MB of float images at a time: their temporaries stay in cache


def chunk_items(images: torch.Tensor, pixels: int | None = None) -> int:
    """How many images of ``images`` ``(n, C, H, W)`` a CPU kernel takes at a time (all of them on a GPU)."""
    if images.device.type != 'cpu':
        return max(1, len(images))
    pixels = images.shape[2] * images.shape[3] if pixels is None else pixels
    return max(1, _CHUNK_BYTES // max(1, images.shape[1] * pixels * 4))


def chunked(kernel: Any, images: torch.Tensor, positions: np.ndarray) -> torch.Tensor:
    """``kernel(images, positions)``, called on pieces of ``chunk_items`` images, into one output tensor.

    Working on pieces that fit in cache is several times faster on the CPU than one call on the whole batch,
    whose float temporaries would each be fresh memory. ``kernel`` must give equal-shaped outputs per item.
    """
    step = chunk_items(images)
    if step >= len(images):
        return kernel(images, positions)
    first = kernel(images[:step], positions[:step])
    out = torch.empty((len(images), *first.shape[1:]), dtype=first.dtype, device=first.device,
                      memory_format=_layout_of(first))
    out[:step] = first
    for start in range(step, len(images), step):
        out[start:start + step] = kernel(images[start:start + step], positions[start:start + step])
    return out


def on_chosen(kernel: Any, positions: np.ndarray, tensor: torch.Tensor, chosen: np.ndarray | None) -> list:
    """Result groups of ``kernel(images, positions)`` on the chosen items of one group; the others are kept.

    The kept images take the result's dtype, so that an action gives every item the same dtype. The kernel runs
    on pieces of the group (``chunked``).
    """
    picked = np.ones(len(positions), dtype=bool) if chosen is None else chosen[positions]
    if picked.all():
        return [(positions, chunked(kernel, tensor, positions))]
    if not picked.any():
        return [(positions, tensor)]
    inside, outside = np.flatnonzero(picked), np.flatnonzero(~picked)
    done = chunked(kernel, take(tensor, inside), positions[inside])
    if done.shape[1:] == tensor.shape[1:] and done.dtype == tensor.dtype:
        out = tensor.clone(memory_format=torch.preserve_format)
        put(out, inside, done)
        return [(positions, out)]
    return [(positions[inside], done), (positions[outside], take(tensor, outside).to(done.dtype))]
