"""invert, clip, posterize, enhance, pil_convert, multiply, add: hand-computed results and Pillow's."""
import numpy as np
import pytest

from flowpipe.expr import PerItem

from .image_cases import make_batch, random_images


def pillow(name='PIL.Image'):
    return pytest.importorskip(name)


def test_invert_uint8_float_and_chosen_channels():
    images = random_images(n=2)
    assert np.array_equal(make_batch(images).invert().images, 255 - images)
    floats = images.astype(np.float32) / 255
    np.testing.assert_allclose(make_batch(floats).invert().images, 1 - floats)
    out = make_batch(images).invert(channels=1).images
    assert np.array_equal(out[..., 1], 255 - images[..., 1]) and np.array_equal(out[..., [0, 2]], images[..., [0, 2]])
    with pytest.raises(ValueError, match='channels'):
        make_batch(images).invert(channels=3)


def test_clip_per_channel_and_per_item():
    images = random_images(n=2)
    out = make_batch(images).clip(PerItem([10, (0, 50, 100)]), 200).images
    assert np.array_equal(out[0], np.clip(images[0], 10, 200))
    assert np.array_equal(out[1], np.clip(images[1], [0, 50, 100], 200))


def test_posterize_keeps_the_high_bits_per_item():
    images = random_images(n=2)
    out = make_batch(images).posterize(PerItem([1, 6])).images
    assert np.array_equal(out[0], images[0] & 0b10000000) and np.array_equal(out[1], images[1] & 0b11111100)
    floats = make_batch(images.astype(np.float32) / 255).posterize(2).images
    np.testing.assert_allclose(floats, (images & 0b11000000) / 255, atol=1e-6)
    with pytest.raises(ValueError, match='bits'):
        make_batch(images).posterize(0)


@pytest.mark.parametrize('letter, name', [('h', 'Color'), ('c', 'Contrast'), ('b', 'Brightness'),
                                          ('s', 'Sharpness')])
@pytest.mark.parametrize('factor', [0.3, 1.7])
def test_enhance_matches_pillow(letter, name, factor):
    image_module, enhance = pillow(), pillow('PIL.ImageEnhance')
    images = random_images(n=2, height=12, width=16)
    out = make_batch(images).enhance(letter, factor).images.astype(int)
    expected = np.stack([np.asarray(getattr(enhance, name)(image_module.fromarray(image)).enhance(factor))
                         for image in images]).astype(int)
    assert np.abs(out - expected).max() <= 1


def test_enhance_per_item_factors_and_edge_cases():
    images = random_images(n=2)
    out = make_batch(images).enhance('bc', PerItem([(0, 1), (1, 1)])).images
    assert (out[0] == 0).all() and np.array_equal(out[1], images[1])
    with pytest.raises(ValueError, match="layout='hx'"):
        make_batch(images).enhance('hx')
    with pytest.raises(ValueError, match='one number per letter'):
        make_batch(images).enhance('hc', (1, 2, 3))


def test_pil_convert_to_grey_and_back():
    image_module = pillow()
    images = random_images(n=2)
    grey = make_batch(images).pil_convert('L').images
    expected = np.stack([np.asarray(image_module.fromarray(image).convert('L')) for image in images])
    assert grey.shape == (2, 10, 14, 1) and np.abs(grey[..., 0].astype(int) - expected).max() <= 1
    rgb = make_batch(grey).pil_convert('RGB').images
    assert rgb.shape == (2, 10, 14, 3) and np.array_equal(rgb[..., 2], grey[..., 0])
    rgba = make_batch(images).pil_convert('RGBA').images
    assert rgba.shape == (2, 10, 14, 4) and (rgba[..., 3] == 255).all()
    with pytest.raises(ValueError, match="mode='CMYK'"):
        make_batch(images).pil_convert('CMYK')


def test_multiply_and_add_per_item_per_channel():
    images = random_images(n=2)
    out = make_batch(images).multiply(PerItem([2, (1, 0.5, 0)])).images
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0], images[0] * 2.0)
    np.testing.assert_allclose(out[1], images[1] * [1, 0.5, 0])
    added = make_batch(images).add(PerItem([1, -1])).images
    np.testing.assert_allclose(added, images + np.array([1.0, -1.0])[:, None, None, None])


def test_clip_true_follows_the_output_range_and_preserve_type_rounds():
    images = random_images(n=2)
    assert make_batch(images).multiply(2, clip=True).images.max() == 1.0   # float output: [0, 1]
    kept = make_batch(images).multiply(1.5, clip=True, preserve_type=True).images
    assert kept.dtype == np.uint8 and np.array_equal(kept, np.clip(np.round(images * 1.5), 0, 255))
    with pytest.raises(ValueError, match='clip'):
        make_batch(images).add(1, clip='yes')


def test_per_channel_values_are_checked_for_every_item_however_the_batch_is_cut_in_pieces():
    images = np.zeros((40, 64, 64, 3), dtype=np.float32)          # several pieces of about 2 MB
    per_item = [1.0] * 40
    per_item[33] = (1.0, 2.0)
    with pytest.raises(ValueError, match=r'multiplier as a number or 3 values.*\(1\.0, 2\.0\)'):
        make_batch(images).multiply(PerItem(per_item))
    with pytest.raises(ValueError, match=r"term as a number or 3 values.*'x'"):
        make_batch(images).add('x')
    scaled = make_batch(images + 1).multiply(PerItem([k / 2 for k in range(40)])).images
    assert np.array_equal(scaled[:, 0, 0, 0], np.arange(40) / 2)
