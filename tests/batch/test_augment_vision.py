"""random_resized_crop, center_crop, color_jitter, random_erasing against per-item references written from
torchvision's definitions (its get_params loops, crop then F.interpolate, the colour blends, HSV by colorsys)."""
import colorsys
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from flowpipe.batch.augment_vision_kernels import (TRIES, erasing_boxes, resample_boxes, resized_crop_boxes,
                                                   resized_crops)
from flowpipe.expr import PerItem

from .image_cases import make_batch, ragged, random_images

pytestmark = pytest.mark.usefixtures('default_dtype')


def reference_box(width, height, scale, ratio, tries, corner, erase=False):
    """torchvision's get_params for one image, from the same uniform numbers: (x, y, w, h), or None (erasing)."""
    area = width * height
    for u_area, u_ratio in tries:
        target = area * (scale[0] + u_area * (scale[1] - scale[0]))
        aspect = math.exp(math.log(ratio[0]) + u_ratio * (math.log(ratio[1]) - math.log(ratio[0])))
        long_, short = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        w, h = (short, long_) if erase else (long_, short)
        if (w < width and h < height) if erase else (0 < w <= width and 0 < h <= height):
            return int(corner[0] * (width - w + 1)), int(corner[1] * (height - h + 1)), w, h
    if erase:
        return None
    if width / height < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif width / height > max(ratio):
        w, h = int(round(height * max(ratio))), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


@pytest.mark.parametrize('scale, ratio', [((0.08, 1.0), (3 / 4, 4 / 3)), ((0.9, 1.0), (2.0, 3.0)),
                                          ((0.5, 1.0), (0.2, 0.3)), ((1.0, 1.0), (1.0, 1.0))])
def test_resized_crop_boxes_are_torchvisions_for_the_same_draws(scale, ratio):
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 60, (200, 2))
    draws, corners = rng.random((200, TRIES, 2)), rng.random((200, 2))
    boxes = resized_crop_boxes(sizes, scale, ratio, draws, corners)
    expected = [reference_box(w, h, scale, ratio, d, c) for (w, h), d, c in zip(sizes, draws, corners)]
    assert [tuple(box) for box in boxes.tolist()] == expected


def test_erasing_boxes_are_torchvisions_and_empty_where_no_try_fits():
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 40, (200, 2))
    draws, corners = rng.random((200, TRIES, 2)), rng.random((200, 2))
    boxes = erasing_boxes(sizes, (0.02, 0.6), (0.3, 3.3), draws, corners)
    expected = [reference_box(w, h, (0.02, 0.6), (0.3, 3.3), d, c, erase=True) for (w, h), d, c
                in zip(sizes, draws, corners)]
    assert any(e is None for e in expected) and any(e is not None for e in expected)
    for box, want in zip(boxes.tolist(), expected):
        assert (box[2:] == [0, 0]) if want is None else tuple(box) == want


def drawn_like(batch_seed, n):
    """The uniform numbers an action draws first from a batch of this seed: tries, then corners."""
    random = make_batch(random_images(n=n), seed=batch_seed).random
    return random.random((n, TRIES, 2)), random.random((n, 2))


@pytest.mark.parametrize('mode, antialias', [('bilinear', True), ('bilinear', False), ('nearest', True)])
@pytest.mark.parametrize('dtype', [np.uint8, np.float32])
def test_random_resized_crop_is_crop_then_interpolate_per_item(mode, antialias, dtype):
    items = np.array([None] * 4, dtype=object)
    for i, shape in enumerate([(30, 40, 3), (25, 18, 3), (30, 40, 3), (9, 50, 3)]):
        image = np.random.default_rng(i).integers(0, 256, shape).astype(np.uint8)
        items[i] = image if dtype == np.uint8 else image.astype(np.float32) / 255
    out = make_batch(items, seed=7).random_resized_crop((12, 10), mode=mode, antialias=antialias).images
    assert out.shape == (4, 10, 12, 3) and out.dtype == dtype
    draws, corners = drawn_like(7, 4)
    for item, result, tries, corner in zip(items, out, draws, corners):
        x, y, w, h = reference_box(item.shape[1], item.shape[0], (0.08, 1.0), (3 / 4, 4 / 3), tries, corner)
        crop = torch.from_numpy(np.ascontiguousarray(item[y:y + h, x:x + w])).permute(2, 0, 1)[None]
        options = {} if mode == 'nearest' else {'align_corners': False, 'antialias': antialias}
        expected = F.interpolate(crop, size=(10, 12), mode=mode, **options)[0].permute(1, 2, 0).numpy()
        np.testing.assert_allclose(result.astype(np.float64), expected.astype(np.float64), atol=1e-6)


@pytest.mark.parametrize('mode, antialias', [('bilinear', True), ('bilinear', False), ('nearest', True)])
@pytest.mark.parametrize('size', [(12, 9), (24, 24), (7, 31)])
def test_all_items_at_once_give_interpolates_pixels(mode, antialias, size):
    # the path off the CPU (one gather pass for every box), run here on the CPU against the per-crop interpolate
    images = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (6, 3, 40, 50)).astype(np.uint8))
    boxes = np.array([[0, 0, 50, 40], [3, 5, 10, 7], [10, 2, 33, 30], [0, 0, 1, 1], [49, 39, 1, 1], [5, 5, 44, 12]])
    floats = images.to(torch.get_default_dtype()) / 255
    together, apart = resample_boxes(floats, boxes, size, mode, antialias), resized_crops(floats, boxes, size, mode,
                                                                                          antialias)
    assert together.dtype == floats.dtype and together.shape == (6, 3, size[1], size[0])
    torch.testing.assert_close(together, apart, atol=1e-5, rtol=0)
    difference = (resample_boxes(images, boxes, size, mode, antialias).int() - resized_crops(
        images, boxes, size, mode, antialias).int()).abs()
    assert difference.max() <= 1            # torch's own uint8 path computes in fixed point


def test_random_resized_crop_fallback_is_the_centred_allowed_box():
    images = random_images(n=2, height=10, width=40)
    out = make_batch(images).random_resized_crop((20, 10), scale=(1.0, 1.0), ratio=(1.0, 2.0)).images
    assert np.array_equal(out, images[:, :, 10:30])       # 4:1 is too wide for ratio <= 2: the centred 20x10


def reference_center_crop(image, width, height):
    """torchvision's center_crop on an (H, W, C) image: zero padding where it is smaller, then round((W-w)/2)."""
    pad_x, pad_y = max(width - image.shape[1], 0), max(height - image.shape[0], 0)
    padded = np.pad(image, ((pad_y // 2, (pad_y + 1) // 2), (pad_x // 2, (pad_x + 1) // 2), (0, 0)))
    top, left = int(round((padded.shape[0] - height) / 2)), int(round((padded.shape[1] - width) / 2))
    return padded[top:top + height, left:left + width]


@pytest.mark.parametrize('size', [(7, 5), (8, 8), 5, (14, 12), (20, 3), (9, 6)])
def test_center_crop_is_torchvisions(size):
    items = ragged((10, 14, 3), (11, 9, 3), (4, 4, 3))
    out = make_batch(items).center_crop(size).images
    width, height = (size, size) if isinstance(size, int) else size
    for item, result in zip(items, out):
        assert np.array_equal(result, reference_center_crop(item, width, height))
    per_item = make_batch(items).center_crop(PerItem([3, (5, 2), 4])).images
    assert [r.shape for r in per_item] == [(3, 3, 3), (2, 5, 3), (4, 4, 3)]


GREY = np.array([0.2989, 0.587, 0.114])


def reference_step(image, step, factor, integer):
    """One ColorJitter step on an (H, W, 3) float image of 0-255 or 0-1 values, from torchvision's definitions."""
    top = 255.0 if integer else 1.0
    grey = image @ GREY
    grey = np.floor(grey) if integer else grey
    if step == 'brightness':
        out = image * factor
    elif step == 'contrast':
        out = factor * image + (1 - factor) * grey.mean()
    elif step == 'saturation':
        out = factor * image + (1 - factor) * grey[..., None]
    else:
        pixels = [colorsys.rgb_to_hsv(*rgb) for rgb in (image / top).reshape(-1, 3)]
        out = np.array([colorsys.hsv_to_rgb((h + factor) % 1.0, s, v) for h, s, v in pixels]).reshape(image.shape)
        out = out * top
    out = np.clip(out, 0, top)
    return np.round(out) if integer else out


@pytest.mark.parametrize('step, value', [('brightness', 1.6), ('brightness', 0.3), ('contrast', 0.4),
                                         ('contrast', 1.8), ('saturation', 0.0), ('saturation', 2.5),
                                         ('hue', 0.3), ('hue', -0.45)])
@pytest.mark.parametrize('dtype', [np.uint8, np.float32])
def test_each_jitter_step_matches_its_definition(step, value, dtype):
    images = random_images(n=3, height=6, width=7, dtype=dtype)
    out = make_batch(images).color_jitter(**{step: (value, value)}).images
    integer = dtype == np.uint8
    for image, result in zip(images, out):
        expected = reference_step(image.astype(np.float64), step, value, integer)
        # uint8: a value at .5 in float64 may round the other way in float32 (factors such as 0.3 are inexact)
        np.testing.assert_allclose(result.astype(np.float64), expected, atol=1 if integer else 2e-6)
        assert not integer or np.mean(result == expected) > 0.9


def test_jitter_order_is_random_per_item_and_factors_cover_their_range():
    images = np.repeat(random_images(n=1, dtype=np.float32), 64, axis=0)
    out = make_batch(images, seed=2).color_jitter(brightness=(1.8, 1.8), contrast=(0.2, 0.2)).images
    first_b = reference_step(reference_step(images[0], 'brightness', 1.8, False), 'contrast', 0.2, False)
    first_c = reference_step(reference_step(images[0], 'contrast', 0.2, False), 'brightness', 1.8, False)
    assert not np.allclose(first_b, first_c, atol=1e-3)      # brightness clips: the order matters
    matches = [np.allclose(r, first_b, atol=1e-5) for r in out], [np.allclose(r, first_c, atol=1e-5) for r in out]
    assert all(a or b for a, b in zip(*matches)) and 10 < sum(matches[0]) < 54
    flat = np.full((64, 2, 2, 3), 0.4, dtype=np.float32)
    factors = make_batch(flat, seed=3).color_jitter(brightness=0.5).images[:, 0, 0, 0] / 0.4
    assert factors.min() >= 0.5 - 1e-6 and factors.max() <= 1.5 + 1e-6 and factors.max() - factors.min() > 0.7


def test_a_single_channel_image_takes_brightness_and_contrast_only():
    images = random_images(n=2, channels=1)
    assert np.array_equal(make_batch(images).color_jitter(saturation=(0, 0), hue=(0.2, 0.2)).images, images)
    assert not np.array_equal(make_batch(images).color_jitter(contrast=(0.5, 0.5)).images, images)


def test_random_erasing_fills_the_box_with_a_value_per_channel_or_noise():
    images = random_images(n=16, dtype=np.float32)
    out = make_batch(images, seed=5).random_erasing(p=1.0, scale=(0.1, 0.3), value=(2, 3, 4)).images
    draws, corners = drawn_like(5, 16)
    for image, result, tries, corner in zip(images, out, draws, corners):
        x, y, w, h = reference_box(14, 10, (0.1, 0.3), (0.3, 3.3), tries, corner, erase=True)
        expected = image.copy()
        expected[y:y + h, x:x + w] = (2, 3, 4)
        assert np.array_equal(result, expected)
    noisy = make_batch(images, seed=5).random_erasing(p=1.0, scale=(0.1, 0.3), value='random').images
    erased = noisy[out == 2]
    assert np.array_equal(noisy[out != (2, 3, 4)], images[out != (2, 3, 4)])
    assert abs(erased.mean()) < 0.3 and 0.7 < erased.std() < 1.3


def test_random_erasing_takes_p_as_torchvision_one_half_by_default():
    images = random_images(n=64)
    out = make_batch(images, seed=1).random_erasing(scale=(0.1, 0.3)).images
    changed = sum(not np.array_equal(a, b) for a, b in zip(out, images))
    assert 16 < changed < 48


@pytest.mark.parametrize('call, error, match', [
    (lambda b: b.random_resized_crop(), TypeError, r'Expected size .* Pass e\.g\. size=224'),
    (lambda b: b.random_resized_crop(8, scale=(0.9, 0.1)), ValueError, r'scale as \(min, max\).*Received: scale='),
    (lambda b: b.random_resized_crop(8, ratio=(0, 1)), ValueError, r'ratio as \(min, max\)'),
    (lambda b: b.random_resized_crop(8, ratio='wide'), TypeError, r'ratio as a pair of numbers'),
    (lambda b: b.random_resized_crop(8, mode='bicubic'), ValueError, r"mode to be one of \('bilinear', 'nearest'\)"),
    (lambda b: b.random_resized_crop((8, 0)), ValueError, r'size as positive whole'),
    (lambda b: b.center_crop(), TypeError, r'Expected size'),
    (lambda b: b.color_jitter(brightness=-0.1), ValueError, r'brightness as a number in \[0, inf\)'),
    (lambda b: b.color_jitter(hue=0.6), ValueError, r'hue as a number in \[0, 0\.5\)'),
    (lambda b: b.color_jitter(hue=(-0.6, 0.1)), ValueError, r'hue as \(min, max\) with -0\.5 <= min'),
    (lambda b: b.color_jitter(contrast=(2, 1)), ValueError, r'contrast as \(min, max\)'),
    (lambda b: b.color_jitter(saturation='lots'), TypeError, r'saturation as a pair of numbers'),
    (lambda b: b.random_erasing(scale=(0.1, 1.5)), ValueError, r'scale as \(min, max\) with 0\.0 <= min <= max <= 1'),
    (lambda b: b.random_erasing(p=1, value='noise'), ValueError, r"value as a number, one per channel, or 'random'"),
    (lambda b: b.random_erasing(p=1, value='random'), ValueError, r"float images with value='random'.*normalize"),
    (lambda b: b.random_erasing(p=1, value=(1, 2)), ValueError, r'value as a number or 3 values'),
    (lambda b: b.pil_convert('RGBA').color_jitter(0.5), ValueError, r'1 or 3 channels.*Received: 4'),
])
def test_bad_arguments_are_refused_with_the_fix(call, error, match):
    with pytest.raises(error, match=match):
        call(make_batch(random_images(n=2)))
