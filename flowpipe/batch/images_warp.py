"""Warping kernels: a group of images resampled through per-item maps (``augment_maps``) in one batched call."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from .augment_maps import is_translation
from .images_data import cast_rounded, chunk_items, put, take

__all__ = ['apply_maps', 'elastic_field', 'gaussian_kernel', 'translate', 'warp']

def _grid(maps: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor, field: torch.Tensor | None,
          perspective: bool) -> torch.Tensor:
    """grid_sample's grid ``(n, H, W, 2)``: where each output pixel centre comes from, in [-1, 1] units."""
    if field is None and not perspective:
        return _affine_grid(maps, xs, ys)
    m = [[maps[:, r, c, None, None] for c in range(3)] for r in range(3)]
    if field is None:
        x, y = xs[None, None, :], ys[None, :, None]
    else:
        x, y = xs[None, None, :] + field[..., 0], ys[None, :, None] + field[..., 1]
    grid = torch.empty((len(maps), len(ys), len(xs), 2), dtype=maps.dtype, device=maps.device)
    torch.add(m[0][0] * x, m[0][1] * y + m[0][2], out=grid[..., 0])   # written in place: no temporary grid
    torch.add(m[1][0] * x, m[1][1] * y + m[1][2], out=grid[..., 1])
    if perspective:
        grid /= (m[2][0] * x + (m[2][1] * y + m[2][2]))[..., None]
    return grid


def _affine_grid(maps: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """The grid of affine maps as one multiply-add over rows of ``(x, y)`` pairs: ``row(x) + y * step``.

    Seen as ``(n, H, 2 W)``, every row of the grid is the same ``2 W`` numbers (what ``x`` contributes, plus the
    offsets) moved by ``y`` times a fixed step: one ``addcmul`` writes it contiguously, faster on the CPU than
    filling the two coordinates separately (strided) or ``affine_grid``'s matrix product.
    """
    n, height, width = len(maps), len(ys), len(xs)
    linear, offset = maps[:, :2, :2], maps[:, :2, 2]
    row = (xs[None, :, None] * linear[:, None, :, 0] + offset[:, None, :]).reshape(n, 1, 2 * width)
    step = linear[:, None, :, 1].expand(n, width, 2).reshape(n, 1, 2 * width)
    grid = torch.empty((n, height, width, 2), dtype=maps.dtype, device=maps.device)
    torch.addcmul(row, ys[None, :, None], step, out=grid.view(n, height, 2 * width))
    return grid


def _to_grid_units(maps: np.ndarray, width: int, height: int) -> np.ndarray:
    # grid_sample (align_corners=False) reads input x at 2 * x / width - 1.
    units = np.array([[2 / width, 0, -1], [0, 2 / height, -1], [0, 0, 1]])
    return units @ maps


def _store(out: torch.Tensor, values: torch.Tensor) -> None:
    """Write float ``values`` ``(n, C, H, W)`` (contiguous) into ``out``, converting dtype and layout in one pass."""
    if not out.is_floating_point():
        info = torch.iinfo(out.dtype)
        values = cast_rounded(values.round_().clamp_(info.min, info.max), out.dtype)
    if out.is_contiguous() or out.device.type != 'cpu':
        out.copy_(values)
        return
    # Into channels-last one channel at a time: torch's copy with the 3 channels innermost is slower.
    for channel in range(values.shape[1]):
        out[:, channel].copy_(values[:, channel])


def warp(images: torch.Tensor, maps: np.ndarray, size: tuple[int, int] | None = None, fill: float = 0.0,
         resample: str = 'bilinear', field: torch.Tensor | None = None, reflect: bool = False,
         after: Callable[[torch.Tensor, slice], torch.Tensor] | None = None,
         dtype: torch.dtype | None = None) -> torch.Tensor:
    """Resample ``images`` ``(n, C, H, W)`` through ``maps`` ``(n, 3, 3)``: one ``grid_sample`` per piece.

    Args:
        size: ``(width, height)`` of the output (that of the input by default).
        fill: the value of output pixels that come from outside the input.
        field: ``(n, H, W, 2)`` displacements in pixels added to output positions before the maps (elastic).
        reflect: mirror the input at its borders instead of filling.
        after: ``after(values, items)`` changes the float values ``(k, C, H, W)`` (contiguous) of the items
            ``images[items]`` after sampling, before they are stored (pixel operations fused into the warp).
        dtype: the output's dtype; the input's by default (integers rounded and clipped).

    The output keeps the input's memory layout. On the CPU images go in pieces of about 2 MB, which keeps the work
    in cache; on other devices in one call.
    """
    n, channels, height, width = images.shape
    out_width, out_height = size if size is not None else (width, height)
    compute = images.dtype if images.dtype in (torch.float32, torch.float64) else torch.float32
    layout = torch.channels_last if images.is_contiguous(memory_format=torch.channels_last) and channels > 1 \
        else torch.contiguous_format
    out = torch.empty((n, channels, out_height, out_width), dtype=dtype or images.dtype, device=images.device,
                      memory_format=layout)
    units = torch.as_tensor(_to_grid_units(maps, width, height), dtype=compute, device=images.device)
    perspective = bool(np.any(maps[:, 2, :2] != 0) or np.any(maps[:, 2, 2] != 1))
    xs = torch.arange(out_width, dtype=compute, device=images.device) + 0.5
    ys = torch.arange(out_height, dtype=compute, device=images.device) + 0.5
    step = chunk_items(images, out_width * out_height)
    for start in range(0, n, step):
        piece = slice(start, start + step)
        grid = _grid(units[piece], xs, ys, None if field is None else field[piece].to(compute), perspective)
        # grid_sample reads channels-first input faster than channels-last on the CPU; the layout changes before
        # the conversion, on a quarter of the bytes for uint8
        values = images[piece].contiguous().to(compute)
        if fill:
            values = values - fill
        values = F.grid_sample(values, grid, mode=resample, padding_mode='reflection' if reflect else 'zeros',
                               align_corners=False)
        if fill:
            values += fill
        if after is not None:
            values = after(values, piece)
        _store(out[piece], values)
    return out


def _canvas(images: torch.Tensor, shape: tuple, fill: float | torch.Tensor) -> torch.Tensor:
    """A new ``shape`` tensor in ``images``' dtype, device and memory layout, holding ``fill``."""
    layout = torch.channels_last if shape[1] > 1 and images.is_contiguous(memory_format=torch.channels_last) \
        else torch.contiguous_format
    if isinstance(fill, torch.Tensor):
        return fill.to(images.dtype).expand(shape).clone(memory_format=layout)
    if not images.dtype.is_floating_point:
        info = torch.iinfo(images.dtype)
        fill = min(max(round(fill), info.min), info.max)
    return torch.empty(shape, dtype=images.dtype, device=images.device, memory_format=layout).fill_(fill)


def translate(images: torch.Tensor, dx: np.ndarray, dy: np.ndarray, size: tuple[int, int] | None = None,
              fill: float | torch.Tensor = 0, wrap: bool = False) -> torch.Tensor:
    """Move every image by whole pixels ``(dx[i], dy[i])`` onto an output of ``size``, without resampling.

    Output pixels that come from outside the input take ``fill`` (a number, or a tensor of the output's shape
    such as a background); with ``wrap`` they come from the opposite side instead. Whole-pixel moves are
    memory copies: one slice copy per distinct offset is some 50 times faster than gathering every pixel by
    index (2 ms against 92 ms for 64 images of 224x224x3 on one CPU thread).
    """
    n, channels, height, width = images.shape
    out_width, out_height = size if size is not None else (width, height)
    shifts = np.stack([np.asarray(dx, dtype=np.int64), np.asarray(dy, dtype=np.int64)], axis=1).reshape(n, 2)
    unique, which = np.unique(shifts, axis=0, return_inverse=True)
    which = which.ravel()
    out = _canvas(images, (n, channels, out_height, out_width), 0 if wrap else fill)
    for k, (x, y) in enumerate(unique.tolist()):
        for items in _runs(np.flatnonzero(which == k)):
            if wrap:
                out[items] = torch.roll(images[items], (y, x), dims=(2, 3))
                continue
            top, bottom, left, right = max(y, 0), min(y + height, out_height), max(x, 0), min(x + width, out_width)
            if top < bottom and left < right:
                out[items, :, top:bottom, left:right] = images[items, :, top - y:bottom - y, left - x:right - x]
    return out


def _runs(rows: np.ndarray) -> list[slice]:
    """``rows`` as slices of consecutive items (sliced copies, not index kernels: see ``images_data.take``)."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    return [slice(int(run[0]), int(run[-1]) + 1) for run in np.split(rows, breaks) if len(run)]


def apply_maps(images: torch.Tensor, maps: np.ndarray, fill: float = 0.0, resample: str = 'bilinear') -> torch.Tensor:
    """``warp`` that leaves items with an identity map untouched and copies whole-pixel moves exactly."""
    moved = ~np.all(maps == np.eye(3), axis=(1, 2))
    if not moved.any():
        return images
    if is_translation(maps):
        return translate(images, maps[:, 0, 2] * -1, maps[:, 1, 2] * -1, fill=fill)
    if moved.all():
        return warp(images, maps, fill=fill, resample=resample)
    out = images.clone(memory_format=torch.preserve_format)
    picked = np.flatnonzero(moved)
    put(out, picked, warp(take(images, picked), maps[moved], fill=fill, resample=resample))
    return out


def gaussian_kernel(sigma: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A normalized 1-D Gaussian of ``sigma`` pixels, cut at 4 sigma."""
    radius = max(1, int(4 * sigma + 0.5))
    taps = torch.arange(-radius, radius + 1, dtype=torch.float64)
    kernel = torch.exp(-0.5 * (taps / sigma) ** 2)
    return (kernel / kernel.sum()).to(dtype)


def _blur(planes: torch.Tensor, sigma: float) -> torch.Tensor:
    """Gaussian blur of ``(n, C, H, W)`` planes, zero beyond the border, as two 1-D convolutions."""
    kernel = gaussian_kernel(sigma, planes.dtype).to(planes.device)
    channels, radius = planes.shape[1], len(kernel) // 2
    across = kernel.view(1, 1, 1, -1).expand(channels, 1, 1, -1).contiguous()
    down = kernel.view(1, 1, -1, 1).expand(channels, 1, -1, 1).contiguous()
    rows = F.conv2d(planes, across, padding=(0, radius), groups=channels)
    return F.conv2d(rows, down, padding=(radius, 0), groups=channels)


def elastic_field(noise: np.ndarray, sigmas: np.ndarray, alphas: np.ndarray) -> torch.Tensor:
    """Displacements ``(n, H, W, 2)`` in pixels: ``noise`` ``(n, H, W, 2)`` blurred by ``sigmas``, times ``alphas``."""
    planes = torch.from_numpy(noise).permute(0, 3, 1, 2)
    out = torch.empty_like(planes, memory_format=torch.contiguous_format)
    for sigma in np.unique(sigmas):
        same = torch.as_tensor(np.flatnonzero(sigmas == sigma))
        out[same] = _blur(planes[same].contiguous(), float(sigma))
    out *= torch.as_tensor(alphas, dtype=out.dtype)[:, None, None, None]
    return out.permute(0, 2, 3, 1)
