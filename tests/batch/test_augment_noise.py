"""additive_noise, multiplicative_noise, salt, filter."""
import numpy as np
import pytest

from flowpipe.expr import PerItem

from .image_cases import make_batch, random_images


def test_noise_callable_gets_the_size_and_the_batch_generator():
    sizes = []

    def noise(size, rng):
        sizes.append(size)
        return rng.normal(0, 4, size)
    images = random_images(n=3)
    first = make_batch(images, seed=5).additive_noise(noise).images
    assert sizes == [(3, 10, 14, 3)] and first.dtype == np.float32
    assert np.array_equal(first, make_batch(images, seed=5).additive_noise(noise).images)
    assert not np.array_equal(first, make_batch(images, seed=6).additive_noise(noise).images)


def test_noise_distributions_have_their_parameters():
    images = np.full((4, 32, 32, 3), 100, dtype=np.uint8)
    normal = make_batch(images).additive_noise(('normal', 2, 5)).images - 100
    assert abs(normal.mean() - 2) < 0.2 and abs(normal.std() - 5) < 0.2
    uniform = make_batch(images).multiplicative_noise(('uniform', 0.5, 1.5)).images / 100
    assert 0.5 <= uniform.min() and uniform.max() <= 1.5 and abs(uniform.mean() - 1) < 0.02


def test_noise_clip_and_preserve_type():
    images = random_images()
    kept = make_batch(images).additive_noise(('normal', 0, 50), clip=True, preserve_type=True).images
    assert kept.dtype == np.uint8
    floats = make_batch(images.astype(np.float32) / 255).additive_noise(('normal', 0, 1), clip=True).images
    assert floats.min() == 0 and floats.max() == 1
    with pytest.raises(ValueError, match='noise'):
        make_batch(images).additive_noise(('poisson', 1, 2))


def test_salt_everywhere_nowhere_and_per_item():
    images = random_images(n=2)
    assert (make_batch(images).salt(1.0).images == 255).all()
    assert np.array_equal(make_batch(images).salt(0.0).images, images)
    out = make_batch(images).salt(PerItem([1.0, 0.0]), color=(1, 2, 3)).images
    assert (out[0] == [1, 2, 3]).all() and np.array_equal(out[1], images[1])
    assert (make_batch(images.astype(np.float32) / 255).salt(1.0).images == 1.0).all()


def test_salt_boxes_grow_right_and_down_from_their_seed():
    import torch

    from flowpipe.batch.augment_filters import salt_images
    images = torch.zeros((2, 1, 8, 8), dtype=torch.uint8)
    seeds = torch.zeros((2, 8, 8), dtype=torch.bool)
    seeds[0, 2, 3] = seeds[1, 6, 6] = True
    out = salt_images(images, seeds, (3, 2), torch.tensor([[9.0], [7.0]]), per_seed=False)[:, 0]
    expected = torch.zeros((2, 8, 8), dtype=torch.uint8)
    expected[0, 2:4, 3:6] = 9
    expected[1, 6:8, 6:8] = 7          # cut at the border
    assert torch.equal(out, expected)
    per_seed = salt_images(images, seeds, (1, 1), torch.tensor([[5.0], [6.0]]), per_seed=True)[:, 0]
    assert per_seed[0, 2, 3] == 5 and per_seed[1, 6, 6] == 6 and int(per_seed.sum()) == 11


def test_salt_colors_and_sizes_drawn_per_box():
    images = random_images(n=2, height=16, width=16)
    out = make_batch(images, seed=1).salt(0.05, color=lambda rng: rng.integers(0, 256, 3),
                                          size=lambda rng: int(rng.integers(1, 4))).images
    again = make_batch(images, seed=1).salt(0.05, color=lambda rng: rng.integers(0, 256, 3),
                                            size=lambda rng: int(rng.integers(1, 4))).images
    assert np.array_equal(out, again) and not np.array_equal(out, images)
    painted = out[(out != images).any(axis=-1)]
    assert len({tuple(color) for color in painted}) > 3
    sized = make_batch(images).salt(0.05, color=lambda size, rng: rng.integers(0, 256, (size, 3))).images
    assert not np.array_equal(sized, images)


FIXED = ['BLUR', 'CONTOUR', 'DETAIL', 'EDGE_ENHANCE', 'EDGE_ENHANCE_MORE', 'EMBOSS', 'FIND_EDGES', 'SHARPEN',
         'SMOOTH', 'SMOOTH_MORE']


@pytest.mark.parametrize('mode', FIXED)
def test_fixed_filters_match_pillow_inside_the_border(mode):
    image_module, image_filter = pytest.importorskip('PIL.Image'), pytest.importorskip('PIL.ImageFilter')
    images = random_images(n=2, height=12, width=15)
    out = make_batch(images).filter(mode).images.astype(int)
    expected = np.stack([np.asarray(image_module.fromarray(image).filter(getattr(image_filter, mode)))
                         for image in images]).astype(int)
    assert np.abs(out - expected)[:, 2:-2, 2:-2].max() <= 1


@pytest.mark.parametrize('mode, args, tolerance', [('MedianFilter', (3,), 0), ('MinFilter', (3,), 0),
                                                   ('MaxFilter', (5,), 0), ('BoxBlur', (1,), 1),
                                                   ('GaussianBlur', (1,), 6)])
def test_rank_and_blur_filters_match_pillow_inside_the_border(mode, args, tolerance):
    image_module, image_filter = pytest.importorskip('PIL.Image'), pytest.importorskip('PIL.ImageFilter')
    images = random_images(n=2, height=12, width=15)
    out = make_batch(images).filter(mode, *args).images.astype(int)
    expected = np.stack([np.asarray(image_module.fromarray(image).filter(getattr(image_filter, mode)(*args)))
                         for image in images]).astype(int)
    assert np.abs(out - expected)[:, 3:-3, 3:-3].max() <= tolerance


def test_unsharp_mask_and_unknown_filters():
    images = random_images()
    assert make_batch(images).filter('UnsharpMask', radius=1, percent=100, threshold=0).images.dtype == np.uint8
    with pytest.raises(ValueError, match="mode='Sobel'"):
        make_batch(images).filter('Sobel')
    with pytest.raises(ValueError, match='odd positive size'):
        make_batch(images).filter('MedianFilter', 4)
