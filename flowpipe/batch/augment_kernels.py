"""Torch kernels of the region and colour actions, each on a group of equal-shaped images ``(n, C, H, W)``.

Integer images are taken to span their dtype's range (0-255 for uint8) and float images ``[0, 1]`` where a
kernel needs a range (``invert``, ``posterize``, ``clip=True``); results keep the input's dtype, integers
rounded and clipped.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .images_data import Groups, cast_rounded, put, take

__all__ = ['LUMA', 'as_dtype', 'background_of', 'blend', 'fill_boxes', 'gray', 'pad_by_mode', 'paste_with_mask',
           'patches_of', 'top_value', 'write_patches']

LUMA = (0.299, 0.587, 0.114)   # ITU-R 601-2, the weights of PIL's convert('L')


def top_value(dtype: torch.dtype) -> float | int:
    """The value of white: 1.0 for floats, the dtype's maximum (an int) for integers."""
    return 1.0 if dtype.is_floating_point else int(torch.iinfo(dtype).max)


def as_dtype(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``values`` in ``dtype``; integers rounded and clipped to the dtype's range."""
    if values.dtype == dtype:
        return values
    if not dtype.is_floating_point and values.is_floating_point():
        info = torch.iinfo(dtype)
        return cast_rounded(values.round().clamp_(info.min, info.max), dtype)
    return values.to(dtype)


def _float(images: torch.Tensor) -> torch.Tensor:
    return images if images.dtype in (torch.float32, torch.float64) else images.float()


def pad_by_mode(images: torch.Tensor, borders: np.ndarray, mode: str) -> torch.Tensor:
    """Pad by ``borders`` ``(n, 4)`` ``(left, top, right, bottom)`` with a torch ``F.pad`` mode; one call per border."""
    unique, which = np.unique(borders, axis=0, return_inverse=True)
    if len(unique) == 1:
        left, top, right, bottom = (int(v) for v in unique[0])
        return F.pad(images, (left, right, top, bottom), mode=mode)
    out = None
    for k, (left, top, right, bottom) in enumerate(unique.tolist()):
        picked = np.flatnonzero(which.ravel() == k)
        padded = F.pad(take(images, picked), (left, right, top, bottom), mode=mode)
        out = torch.empty((len(images), *padded.shape[1:]), dtype=images.dtype, device=images.device) \
            if out is None else out
        put(out, picked, padded)
    return out


def _image_tensor(image: Any, channels: int, like: torch.Tensor) -> torch.Tensor:
    """A channels-last ``(H, W[, C])`` image as ``(channels, H, W)`` in ``like``'s dtype and device."""
    tensor = image if isinstance(image, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(image))
    tensor = tensor[..., None] if tensor.ndim == 2 else tensor
    if tensor.shape[2] not in (1, channels):
        raise ValueError(f"Expected a background with 1 or {channels} channels, as the images. Received: shape "
                         f"{tuple(tensor.shape)!r}.")
    tensor = tensor.permute(2, 0, 1).expand(channels, -1, -1)
    return as_dtype(tensor.to(like.device), like.dtype)


def background_of(images: torch.Tensor, backgrounds: list) -> torch.Tensor:
    """``(n, C, H, W)`` backgrounds for ``images``: one per item, in their dtype and device."""
    channels = images.shape[1]
    if all(item is backgrounds[0] for item in backgrounds):
        return _image_tensor(backgrounds[0], channels, images)[None].expand(len(images), -1, -1, -1)
    return torch.stack([_image_tensor(item, channels, images) for item in backgrounds])


def _opacity(mask: Any, device: torch.device) -> torch.Tensor:
    array = np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask)
    array = array[..., 0] if array.ndim == 3 and array.shape[2] == 1 else array
    if array.ndim != 2:
        raise ValueError(f"Expected mask as an (h, w) array. Received: shape {array.shape!r}.")
    scale = 255.0 if array.dtype == np.uint8 else 1.0
    return torch.as_tensor(array.astype(np.float32) / scale, device=device)


def paste_with_mask(images: torch.Tensor, backgrounds: torch.Tensor, masks: list, corners: np.ndarray) -> torch.Tensor:
    """Blend each image onto its background at ``corners`` ``(n, 2)``, its ``mask`` the opacity."""
    from .images_warp import translate
    height, width = backgrounds.shape[2:]
    opacity = torch.stack([_opacity(mask, images.device) for mask in masks])[:, None]
    if opacity.shape[2:] != images.shape[2:]:
        raise ValueError(f"Expected masks of the images' size {tuple(images.shape[2:])!r} (H, W). Received: "
                         f"{tuple(opacity.shape[2:])!r}.")
    moved = translate(_float(images), corners[:, 0], corners[:, 1], size=(width, height))
    alpha = translate(opacity, corners[:, 0], corners[:, 1], size=(width, height))
    ground = _float(backgrounds)
    return as_dtype(ground + (moved - ground) * alpha, images.dtype)


def fill_boxes(images: torch.Tensor, corners: np.ndarray, boxes: np.ndarray,
               colors: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Set a ``boxes[i] = (width, height)`` box at ``corners[i] = (x, y)`` of every image to ``colors[i]``:
    ``(n, C)`` colours, or a tensor of images ``(n, C, H, W)`` in ``images``' dtype whose pixels go there."""
    device, (height, width) = images.device, images.shape[2:]
    xs = torch.arange(width, device=device)[None, :]
    ys = torch.arange(height, device=device)[None, :]
    left, top = (torch.as_tensor(corners[:, k, None], device=device) for k in (0, 1))
    right, bottom = left + torch.as_tensor(boxes[:, 0, None], device=device), \
        top + torch.as_tensor(boxes[:, 1, None], device=device)
    inside = ((ys >= top) & (ys < bottom))[:, None, :, None] & ((xs >= left) & (xs < right))[:, None, None, :]
    if isinstance(colors, torch.Tensor) and colors.ndim == 4:
        return torch.where(inside, colors, images)
    color = as_dtype(torch.as_tensor(colors, device=device), images.dtype)[:, :, None, None]
    return torch.where(inside, color, images)


def _starts(extent: int, patch: int, step: int, drop_last: bool) -> np.ndarray:
    starts = np.arange(0, extent - patch + 1, step)
    if not drop_last and starts[-1] + patch != extent:
        starts = np.append(starts, extent - patch)
    return starts


def patches_of(images: torch.Tensor, patch: np.ndarray, steps: np.ndarray, drop_last: bool) -> torch.Tensor:
    """``(n, P, C, h, w)`` patches of ``patch = (w, h)`` every ``steps = (x, y)``, in reading order."""
    height, width = images.shape[2:]
    xs = _starts(width, int(patch[0]), int(steps[0]), drop_last)
    ys = _starts(height, int(patch[1]), int(steps[1]), drop_last)
    cols = torch.as_tensor(xs[:, None] + np.arange(patch[0]), device=images.device)    # (Px, w)
    rows = torch.as_tensor(ys[:, None] + np.arange(patch[1]), device=images.device)    # (Py, h)
    picked = images[:, :, rows[:, None, :, None], cols[None, :, None, :]]              # (n, C, Py, Px, h, w)
    return picked.permute(0, 2, 3, 1, 4, 5).reshape(len(images), len(ys) * len(xs), images.shape[1],
                                                     int(patch[1]), int(patch[0]))


def write_patches(groups: list, like: Groups, channels_first: bool) -> Any:
    """A component of per-item patches: one array ``(N, P, ...)`` when all agree, else an object array."""
    def layout(tensor: torch.Tensor) -> Any:
        tensor = tensor if channels_first else tensor.movedim(-3, -1)
        tensor = tensor.contiguous()
        return tensor if like.as_torch else tensor.numpy(force=True)
    if len(groups) == 1 and np.array_equal(groups[0][0], np.arange(like.size)):
        return layout(groups[0][1])
    packed = np.empty(like.size, dtype=object)
    for positions, tensor in groups:
        for position, item in zip(positions, tensor):
            packed[position] = layout(item)
    return packed


def gray(images: torch.Tensor) -> torch.Tensor:
    """``(n, 1, H, W)`` luma of RGB images (PIL's weights), in float; one channel is returned as it is."""
    values = _float(images)
    if images.shape[1] == 1:
        return values
    weights = torch.tensor(LUMA, dtype=values.dtype, device=values.device)
    return (values[:, :3] * weights[None, :, None, None]).sum(dim=1, keepdim=True)


def blend(degenerate: torch.Tensor, images: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    """PIL's ``ImageEnhance``: ``degenerate + factor * (image - degenerate)``, per item, in float."""
    values = _float(images)
    return degenerate + factors.to(values.dtype)[:, None, None, None] * (values - degenerate)
