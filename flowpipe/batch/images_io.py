"""Reading image files with Pillow, an optional dependency imported only when a file is read.

``read_images`` decodes the files of a batch in the process's decode pool (Pillow releases the GIL while it
decodes) and copies each decoded image's array straight into its slot of one preallocated ``(N, H, W, 3)`` array
when the sizes agree. The pixels are those of a plain ``np.asarray(Image.open(file).convert('RGB'))`` whatever
the pool's size; ``draft=`` (opt-in) lets JPEG files decode at a reduced scale instead.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ['check_draft', 'pillow', 'read_image', 'read_images']


def pillow() -> Any:
    """Return ``PIL.Image``, or raise an ImportError that says how to install Pillow."""
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("Reading image files needs Pillow, an optional dependency of flowpipe. Install it with "
                          "`pip install pillow` (or `pip install flowpipe[images]`).") from error
    return Image


def check_draft(draft: Any) -> tuple[int, int] | None:
    """``draft`` as ``(width, height)`` of positive ints, or ``None``; raises ValueError for anything else."""
    if draft is None:
        return None
    if (not isinstance(draft, Sequence) or isinstance(draft, str) or len(draft) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v > 0 for v in draft)):
        raise ValueError(f"Expected draft=(width, height) of positive ints, the smallest size the images must keep "
                         f"(the size a later resize gives). Received: draft={draft!r}.")
    return int(draft[0]), int(draft[1])


def _decoded(file: str | os.PathLike, draft: tuple[int, int] | None = None) -> Any:
    """The decoded RGB Pillow image of ``file`` (converted only when the file is not RGB already)."""
    image_module = pillow()
    try:
        with image_module.open(file) as image:
            if draft is not None:
                image.draft('RGB', draft)   # JPEG only: DCT scaling by 1/2, 1/4 or 1/8, never below draft
            image.load()                    # the decode: Pillow releases the GIL here
            return image if image.mode == 'RGB' else image.convert('RGB')
    except (OSError, SyntaxError, ValueError) as error:
        raise ValueError(f"Expected an image file at {os.fspath(file)!r}. Received: a file Pillow cannot decode "
                         f"({error}). Delete or replace it.") from error


def read_image(file: str | os.PathLike, draft: tuple[int, int] | None = None) -> np.ndarray:
    """Decode an image file into an ``(H, W, 3)`` uint8 array (grey and CMYK images are converted to RGB).

    Args:
        draft: ``(width, height)``: let a JPEG file decode at 1/2, 1/4 or 1/8 of its size, the smallest scale
            that keeps both sides at least this large (see ``docs/images.md``); other files are unaffected.

    Raises:
        ImportError: Pillow is not installed.
        ValueError: the file cannot be decoded; the message names it.
    """
    return np.asarray(_decoded(file, check_draft(draft)))


def read_images(files: Sequence[str | os.PathLike], draft: tuple[int, int] | None = None) -> np.ndarray:
    """Decode ``files`` in parallel: one ``(N, H, W, 3)`` uint8 array when all sizes agree, else an object array.

    Each image's array (``np.asarray``, a view of Pillow's ``tobytes()``) is copied straight into its slot of the
    result, in the pool's threads, instead of being kept and stacked after; the files are decoded in the process's
    decode pool, and the result does not depend on its size. ``draft`` as in
    ``read_image``. Raises as ``read_image`` does, for the first bad file in the order of ``files``.
    """
    from .decode_pool import decode_pool
    draft = check_draft(draft)
    pool = decode_pool()
    images = pool.map(functools.partial(_decoded, draft=draft), list(files))
    sizes = {image.size for image in images}
    if len(sizes) != 1:
        packed = np.empty(len(images), dtype=object)
        for i, image in enumerate(images):
            packed[i] = np.asarray(image)
        return packed
    width, height = sizes.pop()
    out = np.empty((len(images), height, width, 3), dtype=np.uint8)

    def fill(position: int) -> None:
        out[position] = np.asarray(images[position])
    pool.map(fill, range(len(images)))
    return out
