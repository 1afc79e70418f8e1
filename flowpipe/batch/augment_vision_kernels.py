"""Kernels of torchvision's augmentations: box sampling, resized crops and the colour jitter steps.

Boxes are drawn as torchvision's ``RandomResizedCrop.get_params`` and ``RandomErasing.get_params`` draw them (up
to 10 tries of an area fraction and a log-uniform aspect ratio), from uniform numbers drawn beforehand from the
batch's generator, for all items at once. The colour steps follow ``torchvision.transforms.functional``'s
definitions on tensors: brightness blends with black, contrast with the mean of the grey image, saturation with
the grey image (weights 0.2989, 0.587, 0.114), and hue turns the hue in HSV; each step clamps to the value range.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from .augment_kernels import as_dtype, top_value
from .images_data import put, take

__all__ = ['TRIES', 'GREY', 'erasing_boxes', 'jitter', 'resample_boxes', 'resized_crops', 'resized_crop_boxes']

TRIES = 10                      # torchvision's attempts before its fallback
GREY = (0.2989, 0.587, 0.114)   # torchvision's rgb_to_grayscale weights


def _tried_sizes(sizes: np.ndarray, scale: tuple, ratio: tuple, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per item and try, ``sqrt(area * aspect)`` and ``sqrt(area / aspect)`` rounded (half to even, as Python's
    ``round``), from ``draws`` ``(n, TRIES, 2)`` uniform in [0, 1): the area fraction and the log aspect ratio."""
    area = (sizes[:, 0] * sizes[:, 1]).astype(np.float64)[:, None]
    target = area * (scale[0] + draws[..., 0] * (scale[1] - scale[0]))
    low, high = np.log(ratio[0]), np.log(ratio[1])
    aspect = np.exp(low + draws[..., 1] * (high - low))
    return np.round(np.sqrt(target * aspect)), np.round(np.sqrt(target / aspect))


def _first(valid: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per item, the value of the first valid try (anything where none is)."""
    return values[np.arange(len(values)), valid.argmax(axis=1)]


def _corners(room: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """Whole positions ``floor(u * (room + 1))``: uniform over ``0..room`` as ``torch.randint(0, room + 1)``."""
    return np.floor(uniform * (room + 1)).astype(np.int64)


def resized_crop_boxes(sizes: np.ndarray, scale: tuple, ratio: tuple, draws: np.ndarray,
                       uniform: np.ndarray) -> np.ndarray:
    """``(n, 4)`` boxes ``(x, y, width, height)`` of ``RandomResizedCrop`` for images of ``sizes`` ``(n, 2)``.

    The first of the tries whose box fits the image, at the position ``uniform`` ``(n, 2)`` picks; where none
    fits, the centred largest box whose aspect ratio is within ``ratio``.
    """
    widths, heights = _tried_sizes(sizes, scale, ratio, draws)
    valid = (widths > 0) & (heights > 0) & (widths <= sizes[:, :1]) & (heights <= sizes[:, 1:])
    box = np.stack([_first(valid, widths), _first(valid, heights)], axis=1).astype(np.int64)
    found = valid.any(axis=1)
    corners = _corners(sizes - box, uniform)
    # torchvision's fallback: the whole image, cut to the nearest allowed aspect ratio, centred
    width, height = sizes[:, 0].astype(np.float64), sizes[:, 1].astype(np.float64)
    ratios = width / height
    fall_w = np.where(ratios > ratio[1], np.round(height * ratio[1]), width)
    fall_h = np.where(ratios < ratio[0], np.round(width / ratio[0]), height)
    fallback = np.stack([fall_w, fall_h], axis=1).astype(np.int64)
    box = np.where(found[:, None], box, fallback)
    corners = np.where(found[:, None], corners, (sizes - fallback) // 2)
    return np.concatenate([corners, box], axis=1)


def erasing_boxes(sizes: np.ndarray, scale: tuple, ratio: tuple, draws: np.ndarray,
                  uniform: np.ndarray) -> np.ndarray:
    """``(n, 4)`` boxes ``(x, y, width, height)`` of ``RandomErasing``: ``ratio`` is height / width there, a box
    must be smaller than the image on both sides, and an item with no such try is left alone (an empty box)."""
    heights, widths = _tried_sizes(sizes, scale, ratio, draws)
    valid = (widths < sizes[:, :1]) & (heights < sizes[:, 1:])
    box = np.stack([_first(valid, widths), _first(valid, heights)], axis=1).astype(np.int64)
    box[~valid.any(axis=1)] = 0
    return np.concatenate([_corners(sizes - box, uniform), box], axis=1)


def resized_crops(images: torch.Tensor, boxes: np.ndarray, size: tuple[int, int], mode: str,
                  antialias: bool) -> torch.Tensor:
    """Every image's box ``(x, y, width, height)`` resized to ``size=(width, height)``: ``(n, C, h, w)``.

    On the CPU each crop is a view resized by ``F.interpolate``, as torchvision's ``resized_crop`` does (uint8
    images directly in bilinear and nearest mode), so the pixels are torchvision's bit for bit. On other devices
    all items go through ``resample_boxes`` at once (within float rounding of the same, a grey level for uint8).
    """
    if images.device.type != 'cpu':
        return resample_boxes(images, boxes, size, mode, antialias)
    from .images_kernels import resize
    out = torch.empty((len(images), images.shape[1], size[1], size[0]), dtype=images.dtype, device=images.device)
    for k, (x, y, width, height) in enumerate(boxes.tolist()):
        out[k] = resize(images[k:k + 1, :, y:y + height, x:x + width], size, mode, antialias)[0]
    return out


def _taps(starts: np.ndarray, lengths: np.ndarray, out: int, mode: str, antialias: bool) -> tuple:
    """Per item, the source positions ``(n, out, K)`` and weights of ``out`` samples of a box ``starts`` and
    ``lengths`` long on one axis, as ``F.interpolate(align_corners=False)`` resamples (PIL's triangle filter
    widened by the scale when antialiasing a reduction); unused taps have weight 0."""
    lengths = lengths[:, None].astype(np.float64)
    scale = lengths / out
    if mode == 'nearest':     # torch computes floor(i * (in / out)) in float32
        ratio = (lengths.astype(np.float32) / np.float32(out)).astype(np.float32)
        index = np.minimum(np.floor(np.arange(out, dtype=np.float32) * ratio), lengths - 1)[..., None]
        return starts[:, None, None] + index.astype(np.int64), np.ones(index.shape)
    centers = scale * (np.arange(out) + 0.5)
    if not antialias:
        real = np.maximum(centers - 0.5, 0)
        low = np.floor(real)
        high = np.minimum(low + 1, lengths - 1)
        index = np.stack([low, high], axis=-1)
        weights = np.stack([1 - (real - low), real - low], axis=-1)
        return starts[:, None, None] + index.astype(np.int64), weights
    support = np.where(scale >= 1, scale, 1.0)
    first = np.maximum(np.trunc(centers - support + 0.5), 0)
    last = np.minimum(np.trunc(centers + support + 0.5), lengths)
    taps = int((last - first).max())
    index = first[..., None] + np.arange(taps)
    distance = (index - centers[..., None] + 0.5) / np.where(scale >= 1, scale, 1.0)[..., None]
    weights = np.where(index < last[..., None], np.clip(1 - np.abs(distance), 0, None), 0)
    weights /= np.where(weights.sum(-1, keepdims=True) == 0, 1, weights.sum(-1, keepdims=True))
    index = np.minimum(index, lengths[..., None] - 1)
    return starts[:, None, None] + index.astype(np.int64), weights


def resample_boxes(images: torch.Tensor, boxes: np.ndarray, size: tuple[int, int], mode: str,
                   antialias: bool) -> torch.Tensor:
    """``resized_crops`` for all items at once: rows then columns, each a weighted sum of gathered taps."""
    n, channels = images.shape[:2]
    values = images
    for axis, (start, length, out) in enumerate(((boxes[:, 1], boxes[:, 3], size[1]),
                                                 (boxes[:, 0], boxes[:, 2], size[0]))):
        index, weights = _taps(start, length, out, mode, antialias)
        index = torch.as_tensor(index, device=images.device)
        dtype = torch.float64 if images.dtype == torch.float64 else torch.float32
        weights = torch.as_tensor(weights, dtype=dtype, device=images.device)
        shape = (n, channels, out, values.shape[3]) if axis == 0 else (n, channels, values.shape[2], out)
        total = torch.zeros(shape, dtype=dtype, device=images.device)
        for tap in range(index.shape[2]):
            if axis == 0:
                picked = values.gather(2, index[:, None, :, tap, None].expand(shape))
                total.addcmul_(picked.to(dtype), weights[:, None, :, tap, None])
            else:
                picked = values.gather(3, index[:, None, None, :, tap].expand(shape))
                total.addcmul_(picked.to(dtype), weights[:, None, None, :, tap])
        values = total
    return as_dtype(values, images.dtype)


def _grey(values: torch.Tensor, integer: bool) -> torch.Tensor:
    """``(n, 1, H, W)`` grey of RGB values (torchvision's weights), floored for integer images as torchvision's
    uint8 grey image; a one-channel image is its own grey. Channel by channel, fast in either memory layout."""
    if values.shape[1] == 1:
        return values
    grey = values[:, 0:1] * GREY[0]
    grey.add_(values[:, 1:2], alpha=GREY[1]).add_(values[:, 2:3], alpha=GREY[2])
    return grey.floor_() if integer else grey


def _brightness(values: torch.Tensor, factors: torch.Tensor, integer: bool) -> torch.Tensor:
    return values.mul_(factors)


def _contrast(values: torch.Tensor, factors: torch.Tensor, integer: bool) -> torch.Tensor:
    mean = _grey(values, integer).mean(dim=(1, 2, 3), keepdim=True)
    return values.mul_(factors).add_(mean * (1 - factors))


def _saturation(values: torch.Tensor, factors: torch.Tensor, integer: bool) -> torch.Tensor:
    if values.shape[1] == 1:
        return values
    grey = _grey(values, integer)
    return values.mul_(factors).add_(grey.mul_(1 - factors))


def _hue(values: torch.Tensor, shifts: torch.Tensor, integer: bool) -> torch.Tensor:
    """Turn the hue (HSV, in turns) by ``shifts`` per item; saturation and value stay.

    With ``max``, ``min`` and ``spread = max - min`` of a pixel's channels, the hue in sixths is ``(g - b) /
    spread`` where red is the largest, ``2 + (b - r) / spread`` where green is, ``4 + (r - g) / spread``
    otherwise; back to RGB each channel is ``max - spread * clamp(min(k, 4 - k), 0, 1)`` with ``k = (m + 6 h) mod
    6`` and ``m`` = 5, 3, 1 for red, green, blue (the value ``v = max`` and saturation ``spread / max`` kept).
    """
    if values.shape[1] == 1:
        return values
    red, green, blue = values[:, 0], values[:, 1], values[:, 2]
    brightest = torch.maximum(torch.maximum(red, green), blue)
    spread = brightest - torch.minimum(torch.minimum(red, green), blue)
    # masks as 0/1 floats from signs (all differences are >= 0): much faster than torch.where on the CPU
    divisor = spread + (1 - torch.sign(spread))                     # 1 where the pixel is grey
    is_red = 1 - torch.sign(brightest - red)
    is_green = (1 - torch.sign(brightest - green)).mul_(1 - is_red)
    is_blue = 1 - is_red - is_green
    sixths = (green - blue).mul_(is_red).add_((blue - red).add_(2 * divisor).mul_(is_green))
    sixths.add_((red - green).add_(4 * divisor).mul_(is_blue)).div_(divisor)
    sixths = _modulo_six(sixths.add_(6 * shifts[:, :, 0]))
    channels = []
    for offset in (5, 3, 1):
        k = _modulo_six(sixths + offset)
        ramp = torch.minimum(k, k.neg().add_(4)).clamp_(0, 1)
        channels.append(brightest - ramp.mul_(spread))
    return torch.stack(channels, dim=1)


def _modulo_six(values: torch.Tensor) -> torch.Tensor:
    """``values mod 6`` in place, by ``x - 6 floor(x / 6)`` (several times faster than ``torch.remainder``)."""
    return values.sub_(values.div(6).floor_().mul_(6))


STEPS: tuple[Callable, ...] = (_brightness, _contrast, _saturation, _hue)


def jitter(images: torch.Tensor, order: np.ndarray, factors: np.ndarray, active: tuple[bool, ...]) -> torch.Tensor:
    """``ColorJitter`` on ``images`` ``(n, C, H, W)``: the steps (brightness, contrast, saturation, hue) in each
    item's ``order`` ``(n, 4)``, with its ``factors`` ``(n, 4)``; inactive steps are skipped.

    Items with the same order of the active steps go together (at most 24 groups); each step clamps to the value
    range and, for integer images, rounds back to whole values (as torchvision casts back after each step).
    """
    if images.shape[1] not in (1, 3):
        raise ValueError(f"Expected images with 1 or 3 channels for color_jitter, as torchvision. Received: "
                         f"{images.shape[1]} channels. Drop an alpha channel first, e.g. `.pil_convert('RGB')`.")
    integer, top = not images.is_floating_point(), float(top_value(images.dtype))
    values = images.to(torch.float64 if images.dtype == torch.float64 else torch.float32,
                       memory_format=torch.preserve_format, copy=True)
    table = torch.as_tensor(factors, dtype=values.dtype, device=values.device)[:, :, None, None]
    used = np.asarray(active)[order]
    sequences = order[used].reshape(len(order), -1)          # each item's active steps, in its order
    keys, which = np.unique(sequences, axis=0, return_inverse=True)
    for k, sequence in enumerate(keys.tolist()):
        rows = np.flatnonzero(which.ravel() == k)
        whole = len(rows) == len(values)
        part = values if whole else take(values, rows)
        scales = table if whole else table[torch.as_tensor(rows, device=values.device)]
        for step in sequence:
            part = STEPS[step](part, scales[:, step:step + 1], integer).clamp_(0, top)
            part = part.round_() if integer else part
        if whole:
            values = part
        else:
            put(values, rows, part)
    return as_dtype(values, images.dtype)
