"""``ImagesBatch``: a batch of images and labels with vectorized image actions.

Images are held channels-last, ``(N, H, W, C)`` uint8 or float arrays when all shapes agree, or a 1-D object
array of ``(H, W, C)`` arrays when they differ; grayscale ``(H, W)`` images count as ``(H, W, 1)``.
``to_array(channels='first')`` switches a component to ``(N, C, H, W)``; the batch remembers each component's
layout, and every action works in either. Sizes follow PIL: ``(width, height)``, origins ``(x, y)``.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import images_kernels as kernels
from .images_io import read_image
from .base import Batch, action

__all__ = ['ImagesBatch']

_LAYOUTS = ('first', 'last')


class ImagesBatch(Batch):
    """A batch of images (``images``) and their labels (``labels``).

    Actions change the ``src`` component (``'images'`` by default) and write to ``dst`` (``src`` by default).
    Random actions (``p=``, ``origin='random'``, an angle range) draw from ``batch.random``, so a run with a
    seed is reproducible. Integer images stay integer through geometric actions (rounded and clipped) and
    become float32 in arithmetic ones (``multiply``, ``add``, ``normalize``).
    """
    components = ('images', 'labels')
    _channels_first: frozenset = frozenset()

    @property
    def image_shape(self) -> tuple[int, ...]:
        """Shape of one image in the current layout: ``(H, W, C)``, or ``(C, H, W)`` after ``to_array()``.

        Raises:
            ValueError: the images have different shapes.
        """
        return self.shape_of('images')

    def shape_of(self, src: str = 'images') -> tuple[int, ...]:
        """Shape of one image of component ``src`` in its current layout (see ``image_shape``)."""
        images = self._hwc(src)
        shapes = {image.shape for image in images} if _is_ragged(images) else {images.shape[1:]}
        if len(shapes) != 1:
            raise ValueError(f"Expected images of one shape in {src!r}. Received: {len(shapes)} shapes, e.g. "
                             f"{sorted(shapes)[:3]!r} (H, W, C). Resize them first, e.g. `.resize((32, 32))`.")
        height, width, channels = shapes.pop()
        return (channels, height, width) if src in self._channels_first else (height, width, channels)

    def _hwc(self, src: str) -> Any:
        images = getattr(self, src, None) if src in self.components else None
        if images is None:
            raise ValueError(f"Expected images in component {src!r}. Received: "
                             f"{'None' if src in self.components else 'no such component'}; the batch has "
                             f"{self.components!r}. Load or preload images first.")
        if src in self._channels_first:
            return np.moveaxis(images, 1, -1) if not _is_ragged(images) else kernels.pack(
                [np.moveaxis(image, 0, -1) for image in images])
        return kernels.as_channels_last(images)

    def _store(self, dst: str, images: Any, channels_first: bool) -> ImagesBatch:
        if dst not in self.components:
            self.check_component_names((dst,))
            self.components = self.components + (dst,)
        setattr(self, dst, images)
        self._channels_first = (self._channels_first | {dst}) if channels_first else (self._channels_first - {dst})
        return self

    def _keep(self, src: str, dst: str | None, images: Any) -> ImagesBatch:
        """Store channels-last ``images`` to ``dst`` in the layout ``src`` had."""
        first = src in self._channels_first
        if first:
            images = np.ascontiguousarray(np.moveaxis(images, -1, 1)) if not _is_ragged(images) else kernels.pack(
                [np.moveaxis(image, -1, 0) for image in images])
        return self._store(src if dst is None else dst, images, first)

    def subset(self, positions: Any) -> ImagesBatch:
        """A new batch of the items at ``positions``, with the same layouts."""
        batch = super().subset(positions)
        batch._channels_first = self._channels_first
        return batch

    @classmethod
    def merge(cls, batches: Sequence[Batch], batch_size: int | None = None) -> tuple[Batch, Batch | None]:
        """Concatenate ``batches`` (see ``Batch.merge``), keeping the first batch's layouts."""
        merged = super().merge(batches, batch_size)
        for batch in merged:
            if batch is not None and batches:
                batch._channels_first = getattr(batches[0], '_channels_first', frozenset())
        return merged

    @action
    def resize(self, size: Sequence[int] | None = None, mode: str = 'bilinear', src: str = 'images',
               dst: str | None = None) -> ImagesBatch:
        """Resize images to ``size=(width, height)`` (PIL's order): ``resize((64, 32))`` gives 32 rows.

        Args:
            size: ``(width, height)``, positional or keyword.
            mode: ``'bilinear'`` (antialiased when shrinking, within 1 grey level of Pillow), ``'bicubic'``
                (torch's sharper cubic kernel, a=-0.75) or ``'nearest'``.
        """
        if size is None:
            raise TypeError("Expected resize(size) with size=(width, height). Received: no size. "
                            "Call e.g. .resize((32, 32)).")
        kernels.check_size(size)
        return self._keep(src, dst, kernels.resize_images(self._hwc(src), tuple(size), mode))

    @action
    def to_array(self, dtype: Any = 'float32', channels: str = 'first', src: str = 'images',
                 dst: str | None = None) -> ImagesBatch:
        """Make images one ``(N, C, H, W)`` array (``channels='first'``) or ``(N, H, W, C)`` (``'last'``).

        Values are converted to ``dtype`` without rescaling (use ``multiply`` or ``normalize`` for that).

        Raises:
            ValueError: images have different shapes (resize or crop them first), or ``channels`` is unknown.
        """
        if channels not in _LAYOUTS:
            raise ValueError(f"Expected channels to be one of {_LAYOUTS!r}. Received: channels={channels!r}.")
        stacked = kernels.stack_images(self._hwc(src)).astype(np.dtype(dtype), copy=False)
        if channels == 'first':
            stacked = np.moveaxis(stacked, -1, 1)
        return self._store(src if dst is None else dst, np.ascontiguousarray(stacked), channels == 'first')

    @action
    def crop(self, origin: str | Sequence[int] = 'center', shape: Sequence[int] | None = None,
             src: str = 'images', dst: str | None = None) -> ImagesBatch:
        """Cut a ``shape=(width, height)`` window from every image.

        Args:
            origin: the window's top-left corner ``(x, y)``, ``'center'``, or ``'random'`` (a uniform position
                per image, from ``batch.random``).
            shape: ``(width, height)`` of the window; it must fit inside every image.
        """
        width, height = kernels.check_size(shape, name='shape')
        images = self._hwc(src)
        sizes = np.array([image.shape[:2] for image in images], dtype=np.int64).reshape(-1, 2)  # (H, W)
        room = sizes - [height, width]
        if len(room) and room.min() < 0:
            bad = int(np.argmin(room.min(axis=1)))
            raise ValueError(f"Expected a crop shape=(width, height) that fits every image. Received: "
                             f"shape={tuple(shape)!r} for an image of {sizes[bad][1]}x{sizes[bad][0]} (width x "
                             f"height) at position {bad}. Resize first or crop a smaller window.")
        origins = self._crop_origins(origin, room)
        return self._keep(src, dst, kernels.crop_images(images, origins, (width, height)))

    def _crop_origins(self, origin: Any, room: np.ndarray) -> np.ndarray:
        """``(N, 2)`` top-left corners ``(x, y)`` from ``room`` = free ``(rows, cols)`` per image."""
        if isinstance(origin, str):
            if origin == 'center':
                return room[:, ::-1] // 2
            if origin == 'random':
                return (self.random.random(room.shape) * (room + 1)).astype(np.int64)[:, ::-1]
        elif isinstance(origin, Sequence) and len(origin) == 2 and all(
                isinstance(v, (int, np.integer)) and v >= 0 for v in origin):
            x, y = int(origin[0]), int(origin[1])
            if len(room) and (x > room[:, 1].min() or y > room[:, 0].min()):
                raise ValueError(f"Expected a crop window inside every image. Received: origin={tuple(origin)!r}, "
                                 f"whose window goes past the border. Move the origin or crop less.")
            return np.tile([x, y], (len(room), 1))
        raise ValueError(f"Expected origin to be 'center', 'random' or (x, y) non-negative ints. "
                         f"Received: origin={origin!r}.")

    def _draw_mask(self, p: float) -> np.ndarray:
        if not isinstance(p, (int, float, np.number)) or not 0 <= p <= 1:
            raise ValueError(f"Expected a probability p in [0, 1]. Received: p={p!r}.")
        return self.random.random(len(self)) < p

    @action
    def flip(self, mode: str = 'lr', p: float = 1.0, src: str = 'images', dst: str | None = None) -> ImagesBatch:
        """Mirror images left-right (``mode='lr'``) or upside-down (``'ud'``), each with probability ``p``."""
        axes = {'lr': 2, 'ud': 1}
        if mode not in axes:
            raise ValueError(f"Expected mode 'lr' or 'ud'. Received: mode={mode!r}.")
        mask = self._draw_mask(p)
        return self._keep(src, dst, kernels.flip_images(self._hwc(src), mask, axes[mode]))

    @action
    def rotate(self, angle: float | Sequence[float], p: float = 1.0, fill: float = 0, mode: str = 'bilinear',
               src: str = 'images', dst: str | None = None) -> ImagesBatch:
        """Rotate images counter-clockwise about their centres (as PIL's ``rotate``), keeping their size.

        Args:
            angle: degrees, or ``(low, high)`` for a uniform random angle per image.
            p: the probability to rotate each image; the others stay as they are.
            fill: the value of the corners that come from outside the image.
            mode: ``'bilinear'`` or ``'nearest'``.
        """
        angles = self._draw_angles(angle)
        angles[~self._draw_mask(p)] = 0.0
        return self._keep(src, dst, kernels.rotate_images(self._hwc(src), angles, fill, mode))

    def _draw_angles(self, angle: Any) -> np.ndarray:
        if isinstance(angle, (int, float, np.number)) and np.isfinite(angle):
            return np.full(len(self), float(angle))
        if (isinstance(angle, Sequence) and len(angle) == 2
                and all(isinstance(a, (int, float, np.number)) and np.isfinite(a) for a in angle)
                and angle[0] <= angle[1]):
            return self.random.uniform(angle[0], angle[1], size=len(self))
        raise ValueError(f"Expected angle in degrees, or (low, high) with low <= high. Received: angle={angle!r}.")

    def _arithmetic(self, func: Any, src: str, dst: str | None, clip: Sequence[float] | None) -> ImagesBatch:
        """Apply elementwise ``func`` to channels-last float images (one call per array, per item if ragged)."""
        if clip is not None and (not isinstance(clip, Sequence) or len(clip) != 2):
            raise ValueError(f"Expected clip=(low, high) or None. Received: clip={clip!r}.")
        images = self._hwc(src)
        results = []
        for item in (list(images) if _is_ragged(images) else [images]):
            out = func(item if np.issubdtype(item.dtype, np.floating) else item.astype(np.float32))
            results.append(out if clip is None else np.clip(out, *clip))
        return self._keep(src, dst, kernels.pack(results) if _is_ragged(images) else results[0])

    @action
    def multiply(self, factor: float = 1.0, clip: Sequence[float] | None = None, src: str = 'images',
                 dst: str | None = None) -> ImagesBatch:
        """Multiply pixel values by ``factor`` (e.g. ``1/255``); integer images become float32."""
        return self._arithmetic(lambda x: x * np.asarray(factor, dtype=x.dtype), src, dst, clip)

    @action
    def add(self, term: float = 0.0, clip: Sequence[float] | None = None, src: str = 'images',
            dst: str | None = None) -> ImagesBatch:
        """Add ``term`` to pixel values; integer images become float32."""
        return self._arithmetic(lambda x: x + np.asarray(term, dtype=x.dtype), src, dst, clip)

    @action
    def normalize(self, mean: float | Sequence[float] = 0.0, std: float | Sequence[float] = 1.0,
                  src: str = 'images', dst: str | None = None) -> ImagesBatch:
        """``(x - mean) / std`` with a scalar or one value per channel; integer images become float32."""
        std_array = np.asarray(std, dtype=np.float64)
        if np.any(std_array == 0) or std_array.ndim > 1 or np.ndim(mean) > 1:
            raise ValueError(f"Expected non-zero std and scalars or one value per channel. Received: mean={mean!r}, "
                             f"std={std!r}.")
        mean_array = np.asarray(mean, dtype=np.float64)

        def apply(x: np.ndarray) -> np.ndarray:
            # Channels are the last axis here, so per-channel values broadcast as they are.
            for name, values in (('mean', mean_array), ('std', std_array)):
                if values.size not in (1, x.shape[-1]):
                    raise ValueError(f"Expected {name} to be a scalar or {x.shape[-1]} values, one per channel. "
                                     f"Received: {name}={values.tolist()!r}.")
            return (x - mean_array.astype(x.dtype)) / std_array.astype(x.dtype)
        return self._arithmetic(apply, src, dst, None)

    @action
    def load(self, fmt: str = 'image', dst: str = 'images') -> ImagesBatch:
        """Read the batch's image files (a ``FilesIndex`` of them) into ``dst`` with Pillow.

        Images become ``(H, W, 3)`` uint8 arrays (grey and CMYK files are converted to RGB); one array when
        all shapes agree, an object array otherwise.
        """
        if fmt != 'image':
            raise ValueError(f"Expected fmt='image'. Received: fmt={fmt!r}. Other formats are not supported.")
        if not hasattr(self.index, 'get_fullpath'):
            raise TypeError(f"Expected a batch made from a FilesIndex of image files. Received: an index of type "
                            f"{type(self.index).__name__}. Use FilesIndex(path='folder/*.png').")
        items = [read_image(os.fspath(self.index.get_fullpath(item))) for item in self.indices]
        return self._store(dst, kernels.pack(items), channels_first=False)


def _is_ragged(images: Any) -> bool:
    return not isinstance(images, np.ndarray) or images.dtype == object
