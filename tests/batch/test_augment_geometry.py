"""rotate, scale, shift, flip, transform, elastic_transform: hand-computed results and Pillow's."""
import numpy as np
import pytest

from flowpipe.expr import PerItem

from .image_cases import make_batch, ragged, ramp, random_images


def pillow():
    return pytest.importorskip('PIL.Image')


# --- rotate --------------------------------------------------------------------------------------------------

def test_rotate_per_item_angles():
    images = random_images(n=3, height=9, width=9)
    out = make_batch(images).rotate(PerItem([90, 0, 180])).images
    assert np.array_equal(out[0], np.rot90(images[0], 1))
    assert np.array_equal(out[1], images[1]) and np.array_equal(out[2], images[2, ::-1, ::-1])


def test_rotate_expand_holds_the_whole_image():
    images = ramp(2, height=6, width=10)
    out = make_batch(images).rotate(PerItem([90, 0]), expand=True).images
    assert out[0].shape == (10, 6, 1) and np.array_equal(out[0], np.rot90(images[0], 1))
    assert np.array_equal(out[1], images[1])
    assert make_batch(images).rotate(45, expand=True).images.shape == (2, 12, 12, 1)


def test_rotate_about_a_center_and_translate_like_pillow():
    image_module = pillow()
    images = random_images(n=2, height=16, width=20)
    out = make_batch(images).rotate(25, center=(5, 4), translate=(2, 3), fillcolor=40).images.astype(int)
    expected = np.stack([np.asarray(image_module.fromarray(image).rotate(
        25, resample=image_module.BILINEAR, center=(5, 4), translate=(2, 3), fillcolor=(40, 40, 40)))
        for image in images]).astype(int)
    assert np.abs(out - expected)[:, 4:-4, 4:-4].max() <= 1


def test_rotate_resample_takes_pil_constants_and_rejects_others():
    images = random_images()
    assert np.array_equal(make_batch(images).rotate(33, resample=0).images,
                          make_batch(images).rotate(33, resample='nearest').images)
    with pytest.raises(ValueError, match="resample='area'"):
        make_batch(images).rotate(10, resample='area')


# --- scale ---------------------------------------------------------------------------------------------------

def test_scale_without_preserving_shape_resizes_by_per_item_factors():
    out = make_batch(random_images(n=3, height=10, width=14)).scale(PerItem([0.5, 2, (1, 0.3)])).images
    assert [item.shape for item in out] == [(5, 7, 3), (20, 28, 3), (3, 14, 3)]


def test_scale_preserving_shape_places_the_picture_at_the_origin():
    images = ramp(1, height=6, width=8)
    enlarged = make_batch(images).scale(2, preserve_shape=True, origin='top_left', resample='nearest')
    enlarged = enlarged.images[0, :, :, 0]
    assert np.array_equal(enlarged, images[0, np.arange(6) // 2][:, np.arange(8) // 2, 0])
    shrunk = make_batch(images).scale(0.5, preserve_shape=True, origin='bottom_right', fill=255).images[0, :, :, 0]
    assert (shrunk[:3] == 255).all() and (shrunk[:, :4] == 255).all() and (shrunk[3:, 4:] != 255).all()


def test_scale_origins_center_and_ints():
    images = ramp(1, height=8, width=8)
    center = make_batch(images).scale(2, preserve_shape=True, resample='nearest').images[0, :, :, 0]
    assert np.array_equal(center, images[0, 2 + np.arange(8) // 2][:, 2 + np.arange(8) // 2, 0])
    corner = make_batch(images).scale(2, preserve_shape=True, origin=(4, 0), resample='nearest').images[0, :, :, 0]
    assert np.array_equal(corner, images[0, np.arange(8) // 2][:, 2 + np.arange(8) // 2, 0])   # crop at x=4


def test_scale_rejects_non_positive_factors():
    with pytest.raises(ValueError, match='positive scale factors'):
        make_batch(random_images()).scale(0)


# --- shift ---------------------------------------------------------------------------------------------------

def test_shift_by_whole_pixels_per_item():
    images = ramp(2)
    out = make_batch(images).shift(PerItem([(2, 1), (-1, 0)]), fill=9).images[..., 0]
    first = np.full((6, 8), 9)
    first[1:, 2:] = images[0, :-1, :-2, 0]
    second = np.full((6, 8), 9)
    second[:, :-1] = images[1, :, 1:, 0]
    assert np.array_equal(out[0], first) and np.array_equal(out[1], second)


def test_shift_wrap_is_a_roll_and_fractions_interpolate():
    images = ramp(1)
    assert np.array_equal(make_batch(images).shift((3, -2), mode='wrap').images,
                          np.roll(images, (-2, 3), axis=(1, 2)))
    half = make_batch(images.astype(np.float32)).shift((0.5, 0)).images[0, :, 1:, 0]
    np.testing.assert_allclose(half, (images[0, :, 1:, 0] + images[0, :, :-1, 0]) / 2, atol=1e-4)
    with pytest.raises(ValueError, match='whole-pixel'):
        make_batch(images).shift((0.5, 0), mode='wrap')


# --- flip and fused warps ------------------------------------------------------------------------------------

def test_flip_per_item_p_and_after_a_pending_warp():
    images = random_images(n=2, height=9, width=9)
    out = make_batch(images).rotate(90).flip('lr').images
    assert np.array_equal(out, np.flip(np.rot90(images, 1, axes=(1, 2)), 2))


def test_a_chain_of_warps_is_one_resampling(monkeypatch):
    from flowpipe.batch import images_warp
    calls = []
    original = images_warp.F.grid_sample
    monkeypatch.setattr(images_warp.F, 'grid_sample', lambda *a, **k: calls.append(1) or original(*a, **k))
    batch = make_batch(random_images(n=4)).rotate(PerItem([5, 10, 15, 20])).scale(1.2, preserve_shape=True)
    batch = batch.shift((1, 2)).flip(p=0.5)
    assert calls == [] and 'images' in batch._pending
    assert batch.images.shape == (4, 10, 14, 3) and calls == [1]


def test_noise_and_flip_behind_a_warp_give_what_they_give_after_it():
    images = random_images(n=8)
    noise = ('normal', 0, 5)
    fused = make_batch(images, seed=2).rotate(30).additive_noise(noise, clip=True, preserve_type=True).flip(p=0.5)
    assert len(fused._pending['images'].after) == 2          # noise and flip wait in the warp's pass
    separate = make_batch(images, seed=2).rotate(30)
    assert separate.images.dtype == np.uint8                  # resampled here, rounded to uint8 ...
    separate.additive_noise(noise, clip=True, preserve_type=True).flip(p=0.5)
    difference = fused.images.astype(int) - separate.images.astype(int)
    assert np.abs(difference).max() <= 1                      # ... which the fused pass does once, at the end


def test_the_affine_grid_is_the_general_grid_of_an_affine_map():
    import torch

    from flowpipe.batch.images_warp import _grid
    maps = torch.as_tensor(np.random.default_rng(0).normal(size=(5, 3, 3)), dtype=torch.float32)
    maps[:, 2] = torch.tensor([0.0, 0.0, 1.0])
    xs, ys = torch.arange(7) + 0.5, torch.arange(4) + 0.5
    general = _grid(maps, xs, ys, None, perspective=True)         # each coordinate written by itself
    assert general.shape == (5, 4, 7, 2)
    torch.testing.assert_close(_grid(maps, xs, ys, None, perspective=False), general)
    x, y = 3.5, 2.5
    expected = maps[1, :2, 0] * x + maps[1, :2, 1] * y + maps[1, :2, 2]
    torch.testing.assert_close(general[1, 2, 3], expected)


def test_fused_noise_and_flip_are_the_same_in_both_layouts_and_under_p():
    images = random_images(n=6)
    chain = lambda batch: (batch.rotate(PerItem([5, 10, 15, 20, 25, 30]))        # noqa: E731
                           .additive_noise(('normal', 0, 5), clip=True, preserve_type=True).flip(p=0.5))
    last = chain(make_batch(images, seed=3)).images
    first = chain(make_batch(images, seed=3).to_array(dtype='uint8')).images
    assert np.array_equal(first.transpose(0, 2, 3, 1), last)
    assert np.array_equal(chain(make_batch(images, seed=3)).images, last)


def test_fused_rotations_undo_each_other_where_sequential_ones_would_lose_corners():
    images = random_images(n=2, height=16, width=16, dtype=np.float32)
    out = make_batch(images).rotate(30).rotate(-30).images
    np.testing.assert_allclose(out, images, atol=1e-4)


def test_pending_warps_resolve_on_every_read():
    import pickle
    images = random_images(n=2, height=9, width=9)
    batch = make_batch(images).rotate(90)
    assert np.array_equal(pickle.loads(pickle.dumps(batch)).images, np.rot90(images, 1, axes=(1, 2)))
    batch = make_batch(images).rotate(90)
    assert np.array_equal(batch.subset([1]).images[0], np.rot90(images[1]))
    batch = make_batch(images).rotate(90)
    batch.images = images                                   # a new value replaces the pending warp
    assert np.array_equal(batch.flip().images, np.flip(images, 2))


def test_different_fills_resample_twice_and_dst_is_not_deferred(monkeypatch):
    images = random_images(n=2, height=9, width=9)
    batch = make_batch(images).rotate(90, fill=0).shift((0.5, 0), fill=255)
    assert 'images' in batch._pending and batch._pending['images'].fill == 255
    assert batch.images.shape == images.shape
    copy = make_batch(images).rotate(90, dst='turned')
    assert np.array_equal(copy.__dict__['turned'], np.rot90(images, 1, axes=(1, 2)))
    assert np.array_equal(copy.images, images)


# --- transform -----------------------------------------------------------------------------------------------

def test_transform_affine_shift_is_exact_and_matches_pillow():
    image_module = pillow()
    images = ramp(1, channels=3)
    shifted = make_batch(images).transform('affine', (1, 0, -2, 0, 1, -1)).images
    assert np.array_equal(shifted, make_batch(images).shift((2, 1)).images)
    images = random_images(n=2, height=16, width=20)
    data = (0.9, 0.2, 1.5, -0.1, 1.1, 0.5)
    out = make_batch(images).transform(image_module.AFFINE, data).images.astype(int)
    expected = np.stack([np.asarray(image_module.fromarray(image).transform(
        (20, 16), image_module.AFFINE, data, resample=image_module.BILINEAR)) for image in images]).astype(int)
    assert np.abs(out - expected)[:, 2:-3, 2:-3].max() <= 1


def test_transform_extent_and_perspective_match_pillow():
    image_module = pillow()
    images = random_images(n=1, height=16, width=20)
    out = make_batch(images).transform('extent', (2, 3, 12, 8), size=(20, 10)).images[0].astype(int)
    expected = np.asarray(image_module.fromarray(images[0]).transform(
        (20, 10), image_module.EXTENT, (2, 3, 12, 8), resample=image_module.BILINEAR)).astype(int)
    assert out.shape == (10, 20, 3) and np.abs(out - expected)[1:-1, 1:-1].max() <= 1
    data = (1, 0.1, 0, 0.05, 1, 0, 0.002, 0.001)
    out = make_batch(images).transform('perspective', data).images[0].astype(int)
    expected = np.asarray(image_module.fromarray(images[0]).transform(
        (20, 16), image_module.PERSPECTIVE, data, resample=image_module.BILINEAR)).astype(int)
    assert np.abs(out - expected)[2:-3, 2:-3].max() <= 1


def test_transform_rejects_unknown_methods_and_short_data():
    with pytest.raises(ValueError, match="method='quad'"):
        make_batch(random_images()).transform('quad', (0,) * 8)
    with pytest.raises(ValueError, match='6 numbers'):
        make_batch(random_images()).transform('affine', (1, 0, 0))


# --- elastic_transform ---------------------------------------------------------------------------------------

def test_elastic_without_strength_is_identity_and_moves_images_and_masks_alike():
    images = random_images(n=3)
    assert np.array_equal(make_batch(images).elastic_transform(0, 3).images, images)
    batch = make_batch(images)
    batch.add_components('masks', images.copy())
    batch.elastic_transform(PerItem([0, 4, 8]), 2, src=['images', 'masks'])
    assert np.array_equal(batch.images, batch.masks) and np.array_equal(batch.images[0], images[0])
    assert not np.array_equal(batch.images[2], images[2])


def test_elastic_consumes_a_pending_warp_in_one_resampling(monkeypatch):
    from flowpipe.batch import images_warp
    calls = []
    original = images_warp.F.grid_sample
    monkeypatch.setattr(images_warp.F, 'grid_sample', lambda *a, **k: calls.append(1) or original(*a, **k))
    batch = make_batch(random_images()).rotate(20).elastic_transform(2, 3, fill=0)
    assert calls == [1] and not batch._pending
    with pytest.raises(ValueError, match='sigma > 0'):
        make_batch(random_images()).elastic_transform(2, 0)


def test_geometry_on_mixed_shapes():
    out = make_batch(ragged((6, 8, 3), (9, 5, 3))).rotate(180).shift((1, 0)).images
    assert [item.shape for item in out] == [(6, 8, 3), (9, 5, 3)]
