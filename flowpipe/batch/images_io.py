"""Reading image files with Pillow, an optional dependency imported only when a file is read."""
from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ['pillow', 'read_image']


def pillow() -> Any:
    """Return ``PIL.Image``, or raise an ImportError that says how to install Pillow."""
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("Reading image files needs Pillow, an optional dependency of flowpipe. Install it with "
                          "`pip install pillow` (or `pip install flowpipe[images]`).") from error
    return Image


def read_image(file: str | os.PathLike) -> np.ndarray:
    """Decode an image file into an ``(H, W, 3)`` uint8 array (grey and CMYK images are converted to RGB).

    Raises:
        ImportError: Pillow is not installed.
        ValueError: the file cannot be decoded; the message names it.
    """
    image_module = pillow()
    try:
        with image_module.open(file) as image:
            return np.asarray(image.convert('RGB'))
    except (OSError, SyntaxError, ValueError) as error:
        raise ValueError(f"Expected an image file at {os.fspath(file)!r}. Received: a file Pillow cannot decode "
                         f"({error}). Delete or replace it.") from error
