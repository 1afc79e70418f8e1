"""Batches of known images for the image action tests."""
import numpy as np
import torch

from flowpipe.batch import ImagesBatch


def make_batch(images, labels=None, seed=0):
    n = len(images)
    batch = ImagesBatch(np.arange(n), data={'images': images,
                                            'labels': np.arange(n) if labels is None else labels})
    batch.seed = seed
    return batch


def random_images(n=4, height=10, width=14, channels=3, seed=0, dtype=np.uint8):
    images = np.random.default_rng(seed).integers(0, 256, (n, height, width, channels)).astype(np.uint8)
    return images.astype(dtype) / 255 if np.issubdtype(dtype, np.floating) else images


def ragged(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    items = np.empty(len(shapes), dtype=object)
    for i, shape in enumerate(shapes):
        items[i] = rng.integers(0, 256, shape).astype(np.uint8)
    return items


def ramp(n=1, height=6, width=8, channels=1):
    """Images whose pixel (y, x) holds ``10 * y + x`` (plus 100 per item), uint8."""
    base = 10 * np.arange(height)[:, None] + np.arange(width)[None, :]
    return np.stack([np.repeat((base + 100 * i)[:, :, None], channels, axis=2) for i in range(n)]).astype(np.uint8)


def as_kind(images, kind):
    """``images`` (N, H, W, C) numpy as the kind a test asks for: 'numpy', 'first' or 'torch'."""
    if kind == 'torch':
        return torch.from_numpy(np.ascontiguousarray(images))
    return images


def hwc(batch, src='images'):
    """A component as numpy channels-last, whatever it holds (arrays, tensors, channels-first)."""
    value = getattr(batch, src)
    if isinstance(value, torch.Tensor):
        value = value.numpy()
    if src in batch._channels_first:
        return value.transpose(0, 2, 3, 1) if value.dtype != object else \
            [np.moveaxis(np.asarray(item), 0, -1) for item in value]
    return value
