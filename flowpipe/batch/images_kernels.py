"""Image kernels that work on a whole batch at once.

Every kernel takes images in the channels-last layout: either one numpy array ``(N, H, W, C)`` when all images
share a shape, or a sequence (an object array) of ``(H, W, C)`` arrays when they do not. Images with equal shapes
are processed together in one torch or numpy call; a batch of mixed shapes is split into groups of equal shape.
Sizes follow PIL's convention: ``(width, height)``.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ['as_channels_last', 'check_size', 'crop_images', 'flip_images', 'group_by_shape', 'pack', 'resize_images',
           'rotate_images', 'stack_images']

Images = Any  # np.ndarray (N, H, W, C) or an object array / sequence of (H, W, C) arrays

_MODES = ('nearest', 'bilinear', 'bicubic')


def _item_hwc(image: Any, position: int) -> np.ndarray:
    image = np.asarray(image)
    if image.ndim == 2:
        return image[:, :, None]
    if image.ndim != 3:
        raise ValueError(f"Expected an image of shape (H, W) or (H, W, C). Received: images[{position}] with "
                         f"shape={image.shape!r}. Reshape it before putting it into an ImagesBatch.")
    return image


def as_channels_last(images: Any) -> Images:
    """Bring images to ``(N, H, W, C)`` or a list of ``(H, W, C)``; grayscale ``(H, W)`` gains a channel axis."""
    if isinstance(images, np.ndarray) and images.dtype != object:
        if images.ndim == 3:
            return images[..., None]
        if images.ndim != 4:
            raise ValueError(f"Expected images of shape (N, H, W) or (N, H, W, C). Received: "
                             f"shape={images.shape!r}. Reshape the array before putting it into an ImagesBatch.")
        return images
    return pack([_item_hwc(image, i) for i, image in enumerate(images)])


def pack(items: Sequence[np.ndarray]) -> Images:
    """Stack items into one array when their shapes and dtypes agree, else an object array of them."""
    if len(items) > 0 and all(item.shape == items[0].shape and item.dtype == items[0].dtype for item in items):
        return np.stack(items)
    packed = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        packed[i] = item
    return packed


def group_by_shape(images: Images) -> list[tuple[np.ndarray, np.ndarray]]:
    """Split images into ``(positions, stacked images)`` groups of equal shape and dtype."""
    if isinstance(images, np.ndarray) and images.dtype != object:
        return [(np.arange(len(images)), images)]
    groups: dict[tuple, list[int]] = {}
    for i, image in enumerate(images):
        groups.setdefault((image.shape, image.dtype.str), []).append(i)
    return [(np.array(pos), np.stack([images[i] for i in pos])) for pos in groups.values()]


def _scatter(n: int, results: list[tuple[np.ndarray, np.ndarray]]) -> Images:
    if len(results) == 1:
        return results[0][1]
    items: list[Any] = [None] * n
    for positions, stacked in results:
        for position, image in zip(positions, stacked):
            items[position] = image
    return pack(items)


def stack_images(images: Images) -> np.ndarray:
    """Return images as one ``(N, H, W, C)`` array, or raise if their shapes differ."""
    if isinstance(images, np.ndarray) and images.dtype != object:
        return images
    shapes = sorted({tuple(image.shape) for image in images})
    if len(shapes) > 1:
        raise ValueError(f"Expected images of one shape to make an array. Received: {len(shapes)} shapes "
                         f"(H, W, C), e.g. {shapes[:3]!r}. Resize or crop them to one size first, e.g. "
                         f"`.resize((32, 32))`.")
    return np.stack(list(images)) if len(images) else np.empty((0, 0, 0, 0))


def _to_torch(stacked: np.ndarray, keep_uint8: bool = False) -> torch.Tensor:
    # The permuted view keeps NHWC memory (torch's channels_last), which torch's CPU kernels handle well.
    tensor = torch.from_numpy(np.ascontiguousarray(stacked)).permute(0, 3, 1, 2)
    if tensor.is_floating_point() or (keep_uint8 and tensor.dtype == torch.uint8):
        return tensor
    return tensor.float()


def _from_torch(tensor: torch.Tensor, dtype: np.dtype) -> np.ndarray:
    tensor = tensor.permute(0, 2, 3, 1)
    if np.issubdtype(dtype, np.integer) and tensor.is_floating_point():
        info = np.iinfo(dtype)
        tensor = tensor.round().clamp(info.min, info.max)
    return tensor.numpy().astype(dtype, copy=False)


def check_size(size: Any, name: str = 'size') -> tuple[int, int]:
    """Validate a ``(width, height)`` pair of positive ints."""
    if (not isinstance(size, Sequence) or isinstance(size, str) or len(size) != 2
            or not all(isinstance(s, (int, np.integer)) and s > 0 for s in size)):
        raise ValueError(f"Expected {name} as (width, height), two positive ints. Received: {name}={size!r}. "
                         f"Pass e.g. {name}=(32, 32).")
    return int(size[0]), int(size[1])


def resize_images(images: Images, size: tuple[int, int], mode: str = 'bilinear') -> Images:
    """Resize images to ``size=(width, height)``: one ``F.interpolate`` call per group of equal shape.

    Downscaling is antialiased (as in PIL) for the bilinear and bicubic modes; integer images are rounded and
    clipped back to their dtype.
    """
    width, height = check_size(size)
    if mode not in _MODES:
        raise ValueError(f"Expected mode to be one of {_MODES!r}. Received: mode={mode!r}.")
    results = []
    for positions, stacked in group_by_shape(images):
        kwargs = {} if mode == 'nearest' else {'align_corners': False, 'antialias': True}
        # torch resizes uint8 directly (about 10x faster than through float32) in these two modes; its uint8
        # bicubic rounds differently from the float path, so bicubic goes through float.
        tensor = _to_torch(stacked, keep_uint8=mode in ('nearest', 'bilinear'))
        out = F.interpolate(tensor, size=(height, width), mode=mode, **kwargs)
        results.append((positions, _from_torch(out, stacked.dtype)))
    return _scatter(len(images), results)


def crop_images(images: Images, origins: np.ndarray, size: tuple[int, int]) -> Images:
    """Cut a ``size=(width, height)`` window at ``origins[i] = (x, y)`` (top-left corner) of every image."""
    width, height = size
    results = []
    for positions, stacked in group_by_shape(images):
        rows = origins[positions, 1][:, None] + np.arange(height)
        cols = origins[positions, 0][:, None] + np.arange(width)
        picked = np.arange(len(positions))[:, None, None]
        results.append((positions, stacked[picked, rows[:, :, None], cols[:, None, :]]))
    return _scatter(len(images), results)


def flip_images(images: Images, mask: np.ndarray, axis: int) -> Images:
    """Flip the images where ``mask`` is true: ``axis=1`` up-down, ``axis=2`` left-right (``(N, H, W, C)``)."""
    results = []
    for positions, stacked in group_by_shape(images):
        out = stacked.copy()
        chosen = mask[positions]
        out[chosen] = np.flip(stacked[chosen], axis=axis)
        results.append((positions, out))
    return _scatter(len(images), results)


def _rotation_grid(angles: np.ndarray, height: int, width: int) -> torch.Tensor:
    # affine_grid works in normalized [-1, 1] coordinates, so a non-square image needs its aspect ratio
    # folded into the matrix for the rotation to stay rigid.
    radians = torch.from_numpy(np.deg2rad(angles)).float()
    cos, sin = torch.cos(radians), torch.sin(radians)
    aspect = width / height
    theta = torch.zeros(len(angles), 2, 3)
    theta[:, 0, 0], theta[:, 0, 1] = cos, -sin / aspect
    theta[:, 1, 0], theta[:, 1, 1] = sin * aspect, cos
    return F.affine_grid(theta, [len(angles), 1, height, width], align_corners=False)


def rotate_images(images: Images, angles: np.ndarray, fill: float = 0, mode: str = 'bilinear') -> Images:
    """Rotate images counter-clockwise by ``angles`` degrees about their centres, keeping their size.

    Corners that come from outside the image are set to ``fill``. One ``grid_sample`` call per shape group.
    """
    if mode not in ('nearest', 'bilinear'):
        raise ValueError(f"Expected mode 'nearest' or 'bilinear'. Received: mode={mode!r}.")
    results = []
    for positions, stacked in group_by_shape(images):
        tensor = _to_torch(stacked) - fill
        grid = _rotation_grid(np.asarray(angles, dtype=np.float64)[positions], *stacked.shape[1:3])
        out = F.grid_sample(tensor, grid.to(tensor.dtype), mode=mode, padding_mode='zeros', align_corners=False)
        results.append((positions, _from_torch(out + fill, stacked.dtype)))
    return _scatter(len(images), results)

