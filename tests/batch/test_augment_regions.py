"""crop, pad, put_on_background, cutout, split_to_patches: hand-computed results."""
import numpy as np
import pytest
import torch

from flowpipe.expr import PerItem

from .image_cases import make_batch, ramp, random_images


@pytest.mark.parametrize('origin, top, left', [('top_left', 0, 0), ('top_right', 0, 4), ('bottom_left', 3, 0),
                                               ('bottom_right', 3, 4), ('center', 1, 2), ((0.5, 0.0), 0, 2),
                                               ((3, 2), 2, 3)])
def test_crop_origins(origin, top, left):
    images = ramp(2)
    out = make_batch(images).crop(origin, (4, 3)).images
    assert np.array_equal(out, images[:, top:top + 3, left:left + 4])


def test_crop_per_item_origins_and_shapes():
    images = ramp(2)
    out = make_batch(images).crop(PerItem([(0, 0), (4, 3)]), PerItem([(2, 2), (3, 3)])).images
    assert np.array_equal(out[0], images[0, :2, :2]) and np.array_equal(out[1], images[1, 3:6, 4:7])


def test_crop_boundaries_cut_windows_to_the_image():
    images = ramp(2)
    out = make_batch(images).crop(PerItem([(6, 4), (-2, 0)]), (4, 4), crop_boundaries=True).images
    assert np.array_equal(out[0], images[0, 4:, 6:]) and np.array_equal(out[1], images[1, :4, :2])
    with pytest.raises(ValueError, match='crop_boundaries=True'):
        make_batch(images).crop((6, 4), (4, 4))


def test_pad_per_item_borders_in_pil_order():
    images = ramp(2)
    out = make_batch(images).pad(PerItem([1, (0, 1, 2, 3)]), fill=255).images
    assert np.array_equal(out[0], np.pad(images[0], ((1, 1), (1, 1), (0, 0)), constant_values=255))
    assert np.array_equal(out[1], np.pad(images[1], ((1, 3), (0, 2), (0, 0)), constant_values=255))
    both = make_batch(images).pad((2, 1)).images   # (left/right, top/bottom)
    assert both.shape == (2, 8, 12, 1) and np.array_equal(both[:, 1:-1, 2:-2], images)


@pytest.mark.parametrize('mode, numpy_mode', [('reflect', 'reflect'), ('edge', 'edge'), ('wrap', 'wrap')])
def test_pad_modes_match_numpy(mode, numpy_mode):
    images = ramp(2)
    out = make_batch(images).pad(PerItem([2, (1, 0, 0, 3)]), mode=mode).images
    assert np.array_equal(out[0], np.pad(images[0], ((2, 2), (2, 2), (0, 0)), mode=numpy_mode))
    assert np.array_equal(out[1], np.pad(images[1], ((0, 3), (1, 0), (0, 0)), mode=numpy_mode))


def test_pad_rejects_bad_borders_and_modes():
    with pytest.raises(ValueError, match='border'):
        make_batch(ramp()).pad((1, 2, 3))
    with pytest.raises(ValueError, match="mode='mirror'"):
        make_batch(ramp()).pad(1, mode='mirror')


def test_put_on_background_at_per_item_origins_cuts_what_overflows():
    images = ramp(2)
    ground = np.full((10, 12), 7, dtype=np.uint8)   # grey: used for every channel
    out = make_batch(images).put_on_background(ground, PerItem([(1, 2), (8, 7)])).images[..., 0]
    first = np.full((10, 12), 7)
    first[2:8, 1:9] = images[0, :, :, 0]
    second = np.full((10, 12), 7)
    second[7:, 8:] = images[1, :3, :4, 0]
    assert out.shape == (2, 10, 12) and np.array_equal(out[0], first) and np.array_equal(out[1], second)


def test_put_on_background_with_a_mask_blends():
    images = np.full((1, 2, 2, 3), 200, dtype=np.uint8)
    ground = np.zeros((3, 3, 3), dtype=np.uint8)
    mask = np.array([[255, 0], [128, 64]], dtype=np.uint8)
    out = make_batch(images).put_on_background(ground, (1, 1), mask=mask).images[0, :, :, 0]
    assert np.array_equal(out, [[0, 0, 0], [0, 200, 0], [0, 100, 50]])


def test_cutout_per_item_boxes_and_colors():
    images = ramp(2, channels=3)
    out = make_batch(images).cutout(PerItem([(1, 2), (5, 0)]), PerItem([(2, 3), 2]), PerItem([9, (1, 2, 3)])).images
    first, second = images[0].copy(), images[1].copy()
    first[2:5, 1:3] = 9
    second[0:2, 5:7] = (1, 2, 3)
    assert np.array_equal(out[0], first) and np.array_equal(out[1], second)


def test_split_to_patches_in_reading_order():
    images = ramp(2, height=5, width=7)
    out = make_batch(images).split_to_patches((3, 2), stride=(3, 2)).images
    # x starts 0, 3 and a last one flush right at 4; y starts 0, 2 and 3 (flush bottom)
    assert out.shape == (2, 9, 2, 3, 1)
    assert np.array_equal(out[1, 0], images[1, 0:2, 0:3]) and np.array_equal(out[1, 2], images[1, 0:2, 4:7])
    assert np.array_equal(out[0, 8], images[0, 3:5, 4:7])
    dropped = make_batch(images).split_to_patches((3, 2), stride=(3, 2), drop_last=True).images
    assert dropped.shape == (2, 4, 2, 3, 1)


@pytest.mark.parametrize('droplast, count', [(False, 9), (True, 4)])
def test_split_to_patches_takes_droplast_as_batchflows_tutorial_spells_it(droplast, count):
    images = ramp(2, height=5, width=7)
    out = make_batch(images).split_to_patches((3, 2), stride=(3, 2), droplast=droplast, dst='patches').patches
    expected = make_batch(images).split_to_patches((3, 2), stride=(3, 2), drop_last=droplast).images
    assert out.shape == (2, count, 2, 3, 1) and np.array_equal(out, expected)
    with pytest.raises(ValueError, match='drop_last=True, droplast=False'):
        make_batch(images).split_to_patches((3, 2), drop_last=True, droplast=False)


def test_split_to_patches_keeps_the_layout_and_kind():
    images = ramp(2, height=4, width=4, channels=3)
    out = make_batch(images).to_array(dtype='uint8').split_to_patches(2, stride=2, dst='patches').patches
    assert out.shape == (2, 4, 3, 2, 2)
    tensors = make_batch(torch.from_numpy(images)).split_to_patches(2, stride=2).images
    assert isinstance(tensors, torch.Tensor) and tensors.shape == (2, 4, 2, 2, 3)
    with pytest.raises(ValueError, match='patch_shape'):
        make_batch(images).split_to_patches(5)


def test_region_actions_on_images_and_masks_use_one_random_draw():
    images = random_images(n=8)
    batch = make_batch(images)
    batch.add_components('masks', images.copy())
    batch.crop('random', (5, 5), src=['images', 'masks']).cutout('random', 2, 0, src=['images', 'masks'], p=0.5)
    assert np.array_equal(batch.images, batch.masks)
