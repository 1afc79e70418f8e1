"""ImagesBatch: every action, layouts, dtypes, reproducible random draws, one kernel call per shape group."""
import numpy as np
import pytest

from flowpipe.batch import ImagesBatch
from flowpipe.batch import images_kernels, images_warp

from .image_cases import make_batch, ragged, random_images


@pytest.fixture
def count_interpolate(monkeypatch):
    calls = []
    original = images_kernels.F.interpolate

    def counting(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)
    monkeypatch.setattr(images_kernels.F, 'interpolate', counting)
    return calls


# --- image_shape and layouts ---------------------------------------------------------------------------------

def test_image_shape_is_hwc_before_and_chw_after_to_array():
    batch = make_batch(random_images(height=10, width=14))
    assert batch.image_shape == (10, 14, 3)
    batch.to_array()
    assert batch.image_shape == (3, 10, 14)
    assert batch.images.shape == (4, 3, 10, 14)


def test_grayscale_images_get_a_channel_axis():
    batch = make_batch(random_images(channels=1)[..., 0])
    assert batch.image_shape == (10, 14, 1)
    batch.to_array()
    assert batch.images.shape == (4, 1, 10, 14)


def test_image_shape_of_mixed_shapes_raises_naming_the_fix():
    batch = make_batch(ragged((5, 6, 3), (7, 8, 3)))
    with pytest.raises(ValueError, match='one shape.*resize'):
        batch.image_shape


def test_missing_images_component_is_named():
    batch = ImagesBatch(np.arange(2), data={'labels': np.arange(2)})
    with pytest.raises(ValueError, match="'images'"):
        batch.resize((4, 4))


# --- resize --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('call', [lambda b: b.resize((6, 4)), lambda b: b.resize(size=(6, 4))])
def test_resize_takes_width_then_height_positionally_or_by_keyword(call):
    batch = call(make_batch(random_images(height=10, width=14)))
    assert batch.images.shape == (4, 4, 6, 3)
    assert batch.images.dtype == np.uint8
    assert batch.image_shape == (4, 6, 3)


def test_resize_equal_shapes_is_one_interpolate_call(count_interpolate):
    make_batch(random_images(n=8)).resize((5, 5))
    assert count_interpolate == [(8, 3, 10, 14)]


def test_resize_mixed_shapes_groups_by_shape_and_stacks_the_result(count_interpolate):
    batch = make_batch(ragged((5, 6, 3), (7, 8, 3), (5, 6, 3)))
    batch.resize((4, 3))
    assert sorted(shape[0] for shape in count_interpolate) == [1, 2]
    assert batch.images.dtype == np.uint8 and batch.images.shape == (3, 3, 4, 3)


def test_resize_matches_pillow_bilinear():
    image_module = pytest.importorskip('PIL.Image')
    images = random_images(n=3, height=20, width=30)
    resized = make_batch(images).resize((15, 8)).images.astype(int)
    expected = np.stack([np.asarray(image_module.fromarray(image).resize((15, 8), image_module.BILINEAR))
                         for image in images]).astype(int)
    assert np.abs(resized - expected).max() <= 1


def test_resize_keeps_channels_first_layout_and_float_dtype():
    batch = make_batch(random_images(height=10, width=14)).to_array()
    batch.resize((7, 5))
    assert batch.images.shape == (4, 3, 5, 7)
    assert batch.images.dtype == np.float32
    assert batch.image_shape == (3, 5, 7)


def test_resize_nearest_upscale_repeats_pixels():
    image = np.arange(4, dtype=np.uint8).reshape(1, 2, 2, 1)
    out = make_batch(image).resize((4, 4), mode='nearest').images[0, :, :, 0]
    assert np.array_equal(out, np.repeat(np.repeat([[0, 1], [2, 3]], 2, 0), 2, 1))


@pytest.mark.parametrize('size', [(0, 4), (4,), 'big', (4.5, 3)])
def test_resize_rejects_bad_sizes(size):
    with pytest.raises(ValueError, match=r'\(width, height\)'):
        make_batch(random_images()).resize(size)


def test_resize_without_size_says_how_to_call_it():
    with pytest.raises(TypeError, match='resize'):
        make_batch(random_images()).resize()


@pytest.mark.parametrize('resample, mode', [(0, 'nearest'), (2, 'bilinear'), (3, 'bicubic'), ('nearest', 'nearest')])
def test_resize_takes_batchflows_resample_with_pils_constants(resample, mode):
    images = random_images(height=10, width=14)
    by_name = make_batch(images).resize((6, 9), mode=mode).images
    assert np.array_equal(make_batch(images).resize((6, 9), resample=resample).images, by_name)
    assert np.array_equal(make_batch(images).resize(size=(6, 9), resample=resample, mode=mode).images, by_name)


def test_resize_resample_nearest_upscale_repeats_pixels():
    image = np.arange(4, dtype=np.uint8).reshape(1, 2, 2, 1)
    out = make_batch(image).resize((4, 4), resample=0).images[0, :, :, 0]
    assert np.array_equal(out, np.repeat(np.repeat([[0, 1], [2, 3]], 2, 0), 2, 1))


def test_resize_rejects_pil_filters_it_lacks_and_two_different_modes():
    with pytest.raises(ValueError, match='resample=1'):                    # PIL's LANCZOS
        make_batch(random_images()).resize((3, 3), resample=1)
    with pytest.raises(ValueError, match="not two different ones.*mode='bicubic', resample=0"):
        make_batch(random_images()).resize((3, 3), mode='bicubic', resample=0)


def test_resize_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode='area'"):
        make_batch(random_images()).resize((3, 3), mode='area')


# --- to_array ------------------------------------------------------------------------------------------------

def test_to_array_default_is_float32_channels_first_without_rescaling():
    images = random_images()
    batch = make_batch(images).to_array()
    assert batch.images.dtype == np.float32 and batch.images.flags['C_CONTIGUOUS']
    assert np.array_equal(batch.images, images.transpose(0, 3, 1, 2).astype(np.float32))


def test_to_array_channels_last_and_dtype():
    images = random_images()
    batch = make_batch(images).to_array(dtype='float64', channels='last')
    assert batch.images.dtype == np.float64 and batch.image_shape == (10, 14, 3)
    assert np.array_equal(batch.images, images)
    batch.to_array(channels='first').to_array(dtype=np.uint8, channels='last')
    assert np.array_equal(batch.images, images)


def test_to_array_channels_last_memory_format_keeps_the_shape_and_puts_channels_innermost():
    images = random_images()
    batch = make_batch(images).to_array(memory_format='channels_last')
    array = batch.images
    assert array.shape == (len(images), 3, 10, 14) and batch.image_shape == (3, 10, 14)
    assert np.array_equal(array, images.transpose(0, 3, 1, 2).astype(np.float32))
    assert array.transpose(0, 2, 3, 1).flags['C_CONTIGUOUS']           # (N, H, W, C) in memory
    torch = pytest.importorskip('torch')
    assert torch.from_numpy(array).is_contiguous(memory_format=torch.channels_last)
    # later actions read the layout as any channels-first array
    assert np.array_equal(batch.flip().flip().images, array)


def test_to_array_makes_one_copy_at_most():
    images = random_images().astype(np.float32)
    batch = make_batch(images).to_array(memory_format='channels_last')
    assert np.shares_memory(batch.images, images)            # already float32 channels-last: no copy at all
    back = make_batch(images).to_array().to_array(memory_format='channels_last')
    assert np.array_equal(back.images, images.transpose(0, 3, 1, 2))


def test_to_array_rejects_unknown_memory_formats_and_channels_last_arrays():
    with pytest.raises(ValueError, match="memory_format='nchw'"):
        make_batch(random_images()).to_array(memory_format='nchw')
    with pytest.raises(ValueError, match="channels='first' with memory_format='channels_last'"):
        make_batch(random_images()).to_array(channels='last', memory_format='channels_last')


def test_to_array_of_ragged_images_with_one_shape_stacks_them():
    batch = make_batch(ragged((5, 6, 3), (5, 6, 3))).to_array()
    assert batch.images.shape == (2, 3, 5, 6)


def test_to_array_of_mixed_shapes_says_to_resize():
    with pytest.raises(ValueError, match='resize'):
        make_batch(ragged((5, 6, 3), (7, 8, 3))).to_array()


def test_to_array_rejects_unknown_channels():
    with pytest.raises(ValueError, match="channels='middle'"):
        make_batch(random_images()).to_array(channels='middle')


def test_to_array_into_another_component_keeps_the_source():
    batch = make_batch(random_images()).to_array(dst='tensors')
    assert batch.images.shape == (4, 10, 14, 3)
    assert batch.tensors.shape == (4, 3, 10, 14)
    assert 'tensors' in batch.components


# --- crop ----------------------------------------------------------------------------------------------------

def test_crop_at_an_origin_takes_x_then_y():
    images = random_images()
    batch = make_batch(images).crop(origin=(2, 3), shape=(5, 4))
    assert np.array_equal(batch.images, images[:, 3:7, 2:7])


def test_crop_center():
    images = random_images(height=10, width=14)
    batch = make_batch(images).crop('center', (4, 6))
    assert np.array_equal(batch.images, images[:, 2:8, 5:9])


def test_crop_random_is_reproducible_and_differs_between_items():
    images = np.tile(np.arange(100, dtype=np.uint8).reshape(1, 10, 10, 1), (16, 1, 1, 1))
    first = make_batch(images, seed=5).crop('random', (3, 3)).images
    again = make_batch(images, seed=5).crop('random', (3, 3)).images
    other = make_batch(images, seed=6).crop('random', (3, 3)).images
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    assert len({int(item[0, 0, 0]) for item in first}) > 1
    for item in first:  # every window is a contiguous block of the source
        top_left = int(item[0, 0, 0])
        assert np.array_equal(item[..., 0], images[0, top_left // 10:top_left // 10 + 3,
                                                   top_left % 10:top_left % 10 + 3, 0])


def test_crop_mixed_shapes_and_channels_first():
    batch = make_batch(ragged((5, 6, 3), (7, 8, 3))).crop('center', (2, 2))
    assert batch.images.shape == (2, 2, 2, 3)
    first = make_batch(random_images()).to_array().crop((0, 0), (4, 2))
    assert first.images.shape == (4, 3, 2, 4)


def test_crop_larger_than_an_image_is_refused():
    with pytest.raises(ValueError, match='fits every image'):
        make_batch(random_images(height=10, width=14)).crop('center', (15, 2))


@pytest.mark.parametrize('origin', ['top', (1,), (-1, 0)])
def test_crop_rejects_bad_origins(origin):
    with pytest.raises(ValueError, match='origin'):
        make_batch(random_images()).crop(origin, (2, 2))


def test_crop_origin_past_the_border_is_refused():
    with pytest.raises(ValueError, match='past the border'):
        make_batch(random_images(height=10, width=14)).crop((12, 0), (4, 4))


# --- flip ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize('mode, axis', [('lr', 2), ('ud', 1)])
def test_flip_always(mode, axis):
    images = random_images()
    assert np.array_equal(make_batch(images).flip(mode).images, np.flip(images, axis))


def test_flip_with_probability_is_reproducible_and_flips_some():
    images = random_images(n=32)
    first = make_batch(images, seed=1).flip(p=0.5).images
    again = make_batch(images, seed=1).flip(p=0.5).images
    flipped = [not np.array_equal(a, b) for a, b in zip(first, images)]
    assert np.array_equal(first, again) and 0 < sum(flipped) < 32
    assert np.array_equal(make_batch(images).flip(p=0).images, images)


def test_flip_channels_first_flips_width():
    images = random_images()
    batch = make_batch(images).to_array().flip('lr')
    assert np.array_equal(batch.images, np.flip(images, 2).transpose(0, 3, 1, 2))


def test_flip_rejects_bad_mode_and_probability():
    with pytest.raises(ValueError, match="mode='diagonal'"):
        make_batch(random_images()).flip('diagonal')
    with pytest.raises(ValueError, match='p=1.5'):
        make_batch(random_images()).flip(p=1.5)


# --- rotate --------------------------------------------------------------------------------------------------

def test_rotate_by_90_is_counter_clockwise():
    images = random_images(height=9, width=9)
    rotated = make_batch(images).rotate(90).images
    assert np.array_equal(rotated, np.rot90(images, 1, axes=(1, 2)))


def test_rotate_matches_pillow():
    image_module = pytest.importorskip('PIL.Image')
    images = random_images(n=2, height=12, width=16)
    rotated = make_batch(images).rotate(30).images.astype(int)
    expected = np.stack([np.asarray(image_module.fromarray(image).rotate(30, resample=image_module.BILINEAR))
                         for image in images]).astype(int)
    # Away from the borders (where the two treat outside pixels differently) they agree to rounding.
    assert np.abs(rotated - expected)[:, 3:-3, 3:-3].max() <= 1


def test_rotate_range_is_reproducible_and_p_zero_is_identity():
    images = random_images(n=8, height=9, width=9)
    first = make_batch(images, seed=2).rotate((-30, 30)).images
    assert np.array_equal(first, make_batch(images, seed=2).rotate((-30, 30)).images)
    assert not np.array_equal(first, make_batch(images, seed=3).rotate((-30, 30)).images)
    assert np.array_equal(make_batch(images).rotate(45, p=0).images, images)


def test_rotate_fills_corners_and_is_one_grid_sample_per_shape(monkeypatch):
    calls = []
    original = images_warp.F.grid_sample
    monkeypatch.setattr(images_warp.F, 'grid_sample', lambda *a, **k: calls.append(1) or original(*a, **k))
    batch = make_batch(np.zeros((3, 8, 8, 1), dtype=np.uint8)).rotate(45, fill=200)
    assert calls == [] and batch.images.shape == (3, 8, 8, 1)   # resampled when read
    assert calls == [1]
    assert batch.images[0, 0, 0, 0] == 200 and batch.images[0, 4, 4, 0] == 0


@pytest.mark.parametrize('angle', ['left', (30, 10), (1, 2, 3), float('nan')])
def test_rotate_rejects_bad_angles(angle):
    with pytest.raises(ValueError, match='angle'):
        make_batch(random_images()).rotate(angle)


# --- arithmetic ----------------------------------------------------------------------------------------------

def test_multiply_and_add_make_float32_and_clip():
    images = random_images()
    batch = make_batch(images).multiply(1 / 255)
    assert batch.images.dtype == np.float32
    np.testing.assert_allclose(batch.images, images / 255, rtol=1e-6)
    batch.add(-0.5, clip=(-0.25, 0.25))
    assert batch.images.min() >= -0.25 and batch.images.max() <= 0.25


def test_add_keeps_float64():
    images = random_images().astype(np.float64)
    assert make_batch(images).add(1).images.dtype == np.float64


@pytest.mark.parametrize('to_first', [False, True])
def test_normalize_per_channel_in_both_layouts(to_first):
    images = random_images()
    batch = make_batch(images)
    if to_first:
        batch.to_array()
    batch.normalize(mean=(10, 20, 30), std=(2, 4, 8))
    result = batch.images if not to_first else batch.images.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(result, (images - [10, 20, 30]) / np.array([2, 4, 8]), rtol=1e-5)


def test_normalize_ragged_images():
    batch = make_batch(ragged((5, 6, 3), (7, 8, 3))).normalize(mean=128, std=128)
    assert batch.images[1].dtype == np.float32 and batch.images[1].max() < 1


def test_normalize_rejects_zero_std_and_wrong_channel_counts():
    with pytest.raises(ValueError, match='std'):
        make_batch(random_images()).normalize(std=0)
    with pytest.raises(ValueError, match='mean.*3 values'):
        make_batch(random_images()).normalize(mean=(1, 2))


def test_arithmetic_on_channels_first_keeps_layout_and_contiguity():
    batch = make_batch(random_images()).to_array().multiply(2.0).normalize(mean=(1, 2, 3))
    assert batch.images.shape == (4, 3, 10, 14) and batch.images.flags['C_CONTIGUOUS']
    assert batch.image_shape == (3, 10, 14)


# --- batches made from image files, subsets -------------------------------------------------------------------

def test_load_reads_a_files_index_of_images(tmp_path):
    image_module = pytest.importorskip('PIL.Image')
    from flowpipe.data import Dataset, FilesIndex
    images = random_images(n=3, height=6, width=5)
    for i, image in enumerate(images):
        image_module.fromarray(image).save(tmp_path / f'img{i}.png')
    image_module.fromarray(images[0][..., 0]).save(tmp_path / 'img3.png')  # grey: read as RGB
    dataset = Dataset(FilesIndex(path=str(tmp_path / '*.png')), batch_class=ImagesBatch)
    batch = dataset.create_batch(dataset.indices).load()
    assert batch.images.shape == (4, 6, 5, 3)
    assert np.array_equal(batch.images[:3], images)
    assert np.array_equal(batch.images[3], np.repeat(images[0][..., :1], 3, axis=2))


def test_load_without_pillow_says_how_to_install(monkeypatch, tmp_path):
    import sys
    from flowpipe.data import FilesIndex
    (tmp_path / 'a.png').write_bytes(b'not really')
    monkeypatch.setitem(sys.modules, 'PIL', None)
    batch = ImagesBatch(FilesIndex(path=str(tmp_path / '*.png')))
    with pytest.raises(ImportError, match='pip install pillow'):
        batch.load()


def test_load_of_a_corrupt_file_names_it(tmp_path):
    pytest.importorskip('PIL')
    from flowpipe.data import FilesIndex
    (tmp_path / 'broken.png').write_bytes(b'not an image')
    with pytest.raises(ValueError, match='broken.png'):
        ImagesBatch(FilesIndex(path=str(tmp_path / '*.png'))).load()


def test_subset_keeps_the_layout():
    batch = make_batch(random_images()).to_array()
    part = batch.subset([0, 2])
    assert part.image_shape == (3, 10, 14) and part.images.shape == (2, 3, 10, 14)


def test_actions_are_registered():
    names = set(ImagesBatch.action_names())
    assert {'resize', 'to_array', 'crop', 'flip', 'rotate', 'multiply', 'add', 'normalize', 'load'} <= names


def test_resize_bicubic_is_close_to_pillow_and_stays_uint8():
    image_module = pytest.importorskip('PIL.Image')
    images = random_images(n=2, height=12, width=10)
    resized = make_batch(images).resize((20, 24), mode='bicubic').images
    expected = np.stack([np.asarray(image_module.fromarray(image).resize((20, 24), image_module.BICUBIC))
                         for image in images]).astype(int)
    assert resized.dtype == np.uint8
    # torch's cubic kernel (a=-0.75) is sharper than Pillow's (a=-0.5): close on average, not pixel-exact.
    assert np.abs(resized.astype(int) - expected)[:, 3:-3, 3:-3].mean() < 2
