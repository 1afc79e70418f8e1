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

__all__ = ['TRIES', 'GREY', 'erasing_boxes', 'jitter', 'resized_crops', 'resized_crop_boxes']

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

    Each crop is a view resized by ``F.interpolate`` as torchvision's ``resized_crop`` does (uint8 images
    directly in bilinear and nearest mode), so the pixels are torchvision's, bit for bit.
    """
    from .images_kernels import resize
    out = torch.empty((len(images), images.shape[1], size[1], size[0]), dtype=images.dtype, device=images.device)
    for k, (x, y, width, height) in enumerate(boxes.tolist()):
        out[k] = resize(images[k:k + 1, :, y:y + height, x:x + width], size, mode, antialias)[0]
    return out


def _grey(values: torch.Tensor, integer: bool) -> torch.Tensor:
    """``(n, 1, H, W)`` grey of RGB values (torchvision's weights), floored for integer images as torchvision's
    uint8 grey image; a one-channel image is its own grey."""
    if values.shape[1] == 1:
        return values
    weights = torch.tensor(GREY, dtype=values.dtype, device=values.device)[None, :, None, None]
    grey = (values * weights).sum(dim=1, keepdim=True)
    return grey.floor_() if integer else grey


def _blend(values: torch.Tensor, other: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """``factor * values + (1 - factor) * other``, one factor per item."""
    factors = factors[:, None, None, None]
    return values * factors + other * (1 - factors)


def _brightness(values: torch.Tensor, factors: torch.Tensor, integer: bool, top: float) -> torch.Tensor:
    return values * factors[:, None, None, None]


def _contrast(values: torch.Tensor, factors: torch.Tensor, integer: bool, top: float) -> torch.Tensor:
    return _blend(values, _grey(values, integer).mean(dim=(1, 2, 3), keepdim=True), factors)


def _saturation(values: torch.Tensor, factors: torch.Tensor, integer: bool, top: float) -> torch.Tensor:
    return values if values.shape[1] == 1 else _blend(values, _grey(values, integer), factors)


def _hue(values: torch.Tensor, shifts: torch.Tensor, integer: bool, top: float) -> torch.Tensor:
    """Turn the hue (HSV, in turns) by ``shifts`` per item; saturation and value stay."""
    if values.shape[1] == 1:
        return values
    rgb = values / top
    red, green, blue = rgb.unbind(dim=1)
    brightest, darkest = rgb.max(dim=1).values, rgb.min(dim=1).values
    spread = brightest - darkest
    grey = spread == 0
    divisor = torch.where(grey, torch.ones_like(spread), spread)
    sector = torch.where(brightest == red, (green - blue) / divisor,
                         torch.where(brightest == green, 2 + (blue - red) / divisor, 4 + (red - green) / divisor))
    hue = torch.where(grey, torch.zeros_like(sector), sector / 6)
    hue = torch.remainder(hue + shifts[:, None, None], 1.0)
    saturation = spread / torch.where(grey, torch.ones_like(brightest), brightest)
    # each channel: v - v s clamp(min(k, 4 - k), 0, 1) with k = (n + 6 h) mod 6 and n = 5, 3, 1 for R, G, B
    channels = []
    for offset in (5, 3, 1):
        k = torch.remainder(offset + 6 * hue, 6)
        channels.append(brightest - brightest * saturation * torch.minimum(k, 4 - k).clamp(0, 1))
    return torch.stack(channels, dim=1) * top


STEPS: tuple[Callable, ...] = (_brightness, _contrast, _saturation, _hue)


def jitter(images: torch.Tensor, order: np.ndarray, factors: np.ndarray, active: tuple[bool, ...]) -> torch.Tensor:
    """``ColorJitter`` on ``images`` ``(n, C, H, W)``: the steps (brightness, contrast, saturation, hue) in each
    item's ``order`` ``(n, 4)``, with its ``factors`` ``(n, 4)``; inactive steps are skipped.

    Each step works on the items that take it at that place of their order, all at once; it clamps to the value
    range and, for integer images, rounds back to whole values (as torchvision casts back after each step).
    """
    if images.shape[1] not in (1, 3):
        raise ValueError(f"Expected images with 1 or 3 channels for color_jitter, as torchvision. Received: "
                         f"{images.shape[1]} channels. Drop an alpha channel first, e.g. `.pil_convert('RGB')`.")
    integer, top = not images.is_floating_point(), float(top_value(images.dtype))
    values = images.to(torch.float64 if images.dtype == torch.float64 else torch.float32, copy=True)
    table = torch.as_tensor(factors, dtype=values.dtype, device=values.device)
    for place in range(order.shape[1]):
        for step, func in enumerate(STEPS):
            rows = np.flatnonzero(order[:, place] == step) if active[step] else ()
            if len(rows) == 0:
                continue
            index = torch.as_tensor(rows, device=values.device)
            done = func(values[index], table[index, step], integer, top).clamp_(0, top)
            values[index] = done.round_() if integer else done
    return as_dtype(values, images.dtype)
