"""``ImagesBatch``: a batch of images and labels with vectorized image actions.

Images are held channels-last, ``(N, H, W, C)`` uint8 or float arrays when all shapes agree, or a 1-D object
array of ``(H, W, C)`` arrays when they differ; grayscale ``(H, W)`` images count as ``(H, W, 1)``.
``to_array(channels='first')`` switches a component to ``(N, C, H, W)``; the batch remembers each component's
layout, and every action works in either. A component may hold torch tensors instead of numpy arrays (on any
device): actions keep them tensors. Sizes follow PIL: ``(width, height)``, origins ``(x, y)``.

The actions live in mixins by kind: ``augment_geometry`` (rotate, scale, shift, flip, transform,
elastic_transform), ``augment_regions`` (crop, pad, put_on_background, cutout, split_to_patches),
``augment_pixels`` (invert, clip, posterize, enhance, pil_convert, multiply, add, normalize),
``augment_noise`` (salt, additive_noise, multiplicative_noise, filter) and ``augment_vision`` (torchvision's
random_resized_crop, center_crop, color_jitter, random_erasing).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .augment_geometry import GeometryActions
from .augment_params import check_size
from .augment_pixels import PixelActions
from .augment_vision import VisionActions
from .base import Batch, action
from .images_io import check_draft, pillow, read_images

__all__ = ['ImagesBatch']

_LAYOUTS = ('first', 'last')
_MODES = ('nearest', 'bilinear', 'bicubic')
_MEMORY_FORMATS = ('contiguous', 'channels_last')


def _resize_mode(mode: str | None, resample: str | int | None) -> str:
    """``resize``'s interpolation from ``mode`` or batchflow's ``resample`` (names or PIL's constants)."""
    if resample is not None:
        from .augment_maps import resample_mode
        chosen = resample_mode(resample)
        if mode is not None and mode != chosen:
            raise ValueError(f"Expected mode= or resample= (batchflow's name for it), not two different ones. "
                             f"Received: mode={mode!r}, resample={resample!r}.")
        return chosen
    if mode is None:
        return 'bilinear'
    if mode not in _MODES:
        raise ValueError(f"Expected mode to be one of {_MODES!r}. Received: mode={mode!r}.")
    return mode


class ImagesBatch(GeometryActions, PixelActions, VisionActions):
    """A batch of images (``images``) and their labels (``labels``).

    Every image action takes ``src`` (a component or a list of them, ``'images'`` by default), ``dst`` (``src``
    by default) and ``p``, the probability to change each item (``None``: every item). Random choices — ``p``,
    ``origin='random'``, noise — draw from ``batch.random``, once per action for all its ``src`` components, so a
    run with a seed is reproducible and images and masks listed together move together. Arguments given as
    ``P(...)`` take one value per item. Integer images stay integer through geometric and colour actions
    (rounded and clipped) and become float32 in arithmetic ones (``multiply``, ``add``, ``normalize``, noise).
    """

    @property
    def image_shape(self) -> tuple[int, ...]:
        """Shape of one image in the current layout: ``(H, W, C)``, or ``(C, H, W)`` after ``to_array()``.

        Raises:
            ValueError: the images have different shapes.
        """
        return self.shape_of('images')

    def shape_of(self, src: str = 'images') -> tuple[int, ...]:
        """Shape of one image of component ``src`` in its current layout (see ``image_shape``)."""
        shapes = {tuple(tensor.shape[1:]) for _, tensor in self._read_unwarped(src).groups}
        if len(shapes) != 1:
            hwc = sorted((h, w, c) for c, h, w in shapes)
            raise ValueError(f"Expected images of one shape in {src!r}. Received: {len(shapes)} shapes, e.g. "
                             f"{hwc[:3]!r} (H, W, C). Resize them first, e.g. `.resize((32, 32))`.")
        channels, height, width = shapes.pop()
        return (channels, height, width) if src in self._channels_first else (height, width, channels)

    def subset(self, positions: Any) -> ImagesBatch:
        """A new batch of the items at ``positions``, with the same layouts."""
        self._materialize_all()
        batch = super().subset(positions)
        batch._channels_first = self._channels_first
        return batch

    @classmethod
    def merge(cls, batches: Sequence[Batch], batch_size: int | None = None,
              **options: Any) -> tuple[Batch, Batch | None]:
        """Concatenate ``batches`` (see ``Batch.merge``), keeping the first batch's layouts."""
        for batch in batches:
            if isinstance(batch, ImagesBatch):
                batch._materialize_all()
        merged = super().merge(batches, batch_size, **options)
        for batch in merged:
            if batch is not None and batches:
                batch._channels_first = getattr(batches[0], '_channels_first', frozenset())
        return merged

    @action
    def resize(self, size: int | Sequence[int | None] | None = None, mode: str | None = None, src: str = 'images',
               dst: str | None = None, p: float | None = None, resample: str | int | None = None) -> ImagesBatch:
        """Resize images to ``size=(width, height)`` (PIL's order): ``resize((64, 32))`` gives 32 rows.

        Args:
            size: ``(width, height)``, positional or keyword; one of them ``None`` keeps the aspect ratio. An int
                is the shorter side, as torchvision's ``Resize(int)``: the longer one becomes
                ``int(size * longer / shorter)`` (``resize(256)`` makes a 500x375 image 341x256).
            mode: ``'bilinear'`` (the default; antialiased when shrinking, within 1 grey level of Pillow),
                ``'bicubic'`` (torch's sharper cubic kernel, a=-0.75) or ``'nearest'``.
            resample: batchflow's (PIL's) name for ``mode``; PIL's constants 0 (``NEAREST``), 2 (``BILINEAR``)
                and 3 (``BICUBIC``) work too.
        """
        if size is None:
            raise TypeError("Expected resize(size) with size=(width, height). Received: no size. "
                            "Call e.g. .resize((32, 32)).")
        mode = _resize_mode(mode, resample)
        if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
            if size <= 0:
                raise ValueError(f"Expected size as (width, height) or a positive int (the shorter side). "
                                 f"Received: size={size!r}. Pass e.g. size=256.")
        elif isinstance(size, Sequence) and len(size) == 2 and (size[0] is None) != (size[1] is None):
            check_size(tuple(1 if v is None else v for v in size))
        else:
            check_size(size)
        from .images_kernels import resize

        def kernel(images: Any, positions: np.ndarray) -> Any:
            height, width = images.shape[2:]
            return resize(images, _target_size(size, width, height), mode)
        return self._apply(kernel, src, dst, p)

    @action
    def to_array(self, dtype: Any = 'float32', channels: str = 'first', src: str = 'images',
                 dst: str | None = None, memory_format: str = 'contiguous') -> ImagesBatch:
        """Make images one numpy ``(N, C, H, W)`` array (``channels='first'``) or ``(N, H, W, C)`` (``'last'``).

        Values are converted to ``dtype`` without rescaling (use ``multiply`` or ``normalize`` for that); torch
        tensors become numpy arrays. The conversion, the layout change and the copy are one pass over the images.

        Args:
            memory_format: for ``channels='first'``: ``'contiguous'`` (row-major ``(N, C, H, W)``) or
                ``'channels_last'``: the same shape with the channels innermost in memory (strides of an
                ``(N, H, W, C)`` array), the layout a model with ``memory_format='channels_last'`` computes in, so
                it gets the array without another copy (``torch.from_numpy`` keeps the strides).

        Raises:
            ValueError: images have different shapes (resize or crop them first), or ``channels`` or
                ``memory_format`` is unknown.
        """
        from .images_data import stacked
        if channels not in _LAYOUTS:
            raise ValueError(f"Expected channels to be one of {_LAYOUTS!r}. Received: channels={channels!r}.")
        if memory_format not in _MEMORY_FORMATS:
            raise ValueError(f"Expected memory_format to be one of {_MEMORY_FORMATS!r}. Received: "
                             f"memory_format={memory_format!r}.")
        if memory_format == 'channels_last' and channels != 'first':
            raise ValueError(f"Expected channels='first' with memory_format='channels_last' (an (N, H, W, C) array "
                             f"is channels-last already). Received: channels={channels!r}.")
        read = self._read(src)
        whole = stacked(read.groups, read.size) if read.size else None
        if whole is None and read.size:
            shapes = sorted({(h, w, c) for _, (c, h, w) in ((p, t.shape[1:]) for p, t in read.groups)})
            raise ValueError(f"Expected images of one shape to make an array. Received: {len(shapes)} shapes "
                             f"(H, W, C), e.g. {shapes[:3]!r}. Resize or crop them to one size first, e.g. "
                             f"`.resize((32, 32))`.")
        array = whole.numpy(force=True) if whole is not None else np.empty((0, 0, 0, 0))
        last = channels == 'last' or memory_format == 'channels_last'
        array = array.transpose(0, 2, 3, 1) if last else array
        # one copy at most: cast and lay out together (no copy when the array is already so)
        array = np.asarray(array, dtype=np.dtype(dtype), order='C')
        array = array.transpose(0, 3, 1, 2) if channels == 'first' and last else array
        return self._store(src if dst is None else dst, array, channels == 'first')

    @action
    def load(self, src: Any = None, fmt: str | None = None, dst: str | Sequence[str] | None = None,
             draft: Sequence[int] | None = None) -> ImagesBatch:
        """Read the batch's image files into ``dst`` (``'images'``) with Pillow; other data as ``Batch.load``.

        Files are read with ``fmt='image'``, or with no ``src`` from a batch of a ``FilesIndex``. Images become
        ``(H, W, 3)`` uint8 arrays (grey and CMYK files are converted to RGB); one array when all shapes agree,
        an object array otherwise. The files of a batch decode in parallel, in a pool of one thread per core
        shared by all loads, with the same pixels as one by one.

        Args:
            draft: opt-in, ``(width, height)``: the size a later ``resize`` gives. JPEG files then decode at 1/2,
                1/4 or 1/8 scale (libjpeg's DCT scaling), the smallest that keeps both sides at least this large:
                fewer pixels to decode and resize, but other pixels than a full decode (see ``docs/images.md``).
        """
        draft = check_draft(draft)
        if fmt != 'image' and not (fmt is None and src is None and hasattr(self.index, 'get_fullpath')):
            if draft is not None:
                raise ValueError(f"Expected draft= only when loading image files. Received: draft={draft!r} with "
                                 f"fmt={fmt!r}. Drop draft=, or load the files of a FilesIndex.")
            return super().load(src=src, fmt=fmt, dst=dst)
        if src is not None or not isinstance(dst, (str, type(None))):
            raise ValueError(f"Expected load(fmt='image') without src, and one dst component: the files are those "
                             f"of the batch's FilesIndex. Received: src={type(src).__name__}, dst={dst!r}.")
        if not hasattr(self.index, 'get_fullpath'):
            raise TypeError(f"Expected a batch made from a FilesIndex of image files. Received: an index of type "
                            f"{type(self.index).__name__}. Use FilesIndex(path='folder/*.png').")
        files = [os.fspath(self.index.get_fullpath(item)) for item in self.indices]
        return self._store(dst or 'images', read_images(files, draft), channels_first=False)

    @action
    def dump(self, dst: str | os.PathLike, fmt: str | None = 'png', src: str = 'images',
             overwrite: bool = False) -> ImagesBatch:
        """Write every uint8 image of ``src`` under the folder ``dst`` as ``<item id>.<fmt>``, with Pillow.

        An id with folders (``FilesIndex(ids='relative')``: ``'cat/001.png'``) keeps them below ``dst``
        (``dst/cat/001.png.png``), creating them. A file already at a destination is refused before anything is
        written, unless ``overwrite=True``.
        """
        image_module = pillow()
        groups = self._read(src).groups
        for _, tensor in groups:
            if tensor.dtype.is_floating_point or tensor.dtype.itemsize != 1 or tensor.dtype.is_signed:
                raise ValueError(f"Expected uint8 images to write files. Received: {tensor.dtype} in {src!r}. "
                                 f"Scale them to 0-255 and call .to_array(dtype='uint8', channels='last') first.")
        files = {position: _dump_path(dst, self.indices[position], fmt) for positions, _ in groups
                 for position in positions}
        existing = [path for path in files.values() if os.path.lexists(path)]
        if existing and not overwrite:
            raise FileExistsError(f"Expected no files at the dump destinations. Received: {len(existing)} existing, "
                                  f"such as {existing[0]!r}. Dump into an empty folder, or pass overwrite=True.")
        for positions, tensor in groups:
            for position, image in zip(positions, tensor.permute(0, 2, 3, 1).numpy(force=True)):
                os.makedirs(os.path.dirname(files[position]), exist_ok=True)
                image_module.fromarray(image[..., 0] if image.shape[2] == 1 else image).save(files[position])
        return self


def _target_size(size: Any, width: int, height: int) -> tuple[int, int]:
    """The ``(width, height)`` that ``resize(size)`` gives an image of ``width`` x ``height``."""
    if not isinstance(size, Sequence):                  # torchvision's Resize(int): the shorter side
        longer = int(int(size) * max(width, height) / min(width, height))
        return (int(size), longer) if width <= height else (longer, int(size))
    return (size[0] or max(1, int(width * size[1] / height)), size[1] or max(1, int(height * size[0] / width)))


def _dump_path(dst: str | os.PathLike, item: Any, fmt: str | None) -> str:
    """``dst/<item id>.<fmt>``, keeping the folders of the id; an id leading outside ``dst`` is refused."""
    parts = str(item).replace(os.sep, '/').split('/')
    if os.path.isabs(str(item)) or any(part in ('', '.', '..') for part in parts):
        raise ValueError(f"Expected item ids that are file names or relative paths below dst to dump. Received: "
                         f"id={item!r}. Use FilesIndex(ids='name') or ids='relative'.")
    name = f"{parts[-1]}.{fmt}" if fmt else parts[-1]
    return os.path.join(os.fspath(dst), *parts[:-1], name)
