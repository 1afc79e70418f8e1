"""What every image action promises: dtypes, both layouts, torch tensors, p=0 and p=1, seeds, mixed shapes."""
import numpy as np
import pytest
import torch

from flowpipe import B, Dataset, I, ImagesBatch, Pipeline, V
from flowpipe.expr import PerItem

from .image_cases import hwc, make_batch, ragged, random_images

# (action, kwargs, what the dtype becomes: 'keep' or 'float' for integer inputs, whether the size is kept, random)
ACTIONS = [
    ('rotate', {'angle': 30}, 'keep', True, False),
    ('rotate', {'angle': 30, 'expand': True}, 'keep', False, False),
    ('scale', {'factor': 0.7, 'preserve_shape': True}, 'keep', True, False),
    ('scale', {'factor': (1.5, 0.5)}, 'keep', False, False),
    ('shift', {'offset': (2, -1)}, 'keep', True, False),
    ('shift', {'offset': (1.5, 0.5)}, 'keep', True, False),
    ('shift', {'offset': (3, 2), 'mode': 'wrap'}, 'keep', True, False),
    ('flip', {'mode': 'ud'}, 'keep', True, False),
    ('transform', {'method': 'affine', 'data': (1, 0.2, 0, 0.1, 1, 0)}, 'keep', True, False),
    ('transform', {'method': 'perspective', 'data': (1, 0, 0, 0, 1, 0, 0.01, 0)}, 'keep', True, False),
    ('elastic_transform', {'alpha': 3, 'sigma': 2}, 'keep', True, True),
    ('crop', {'origin': 'random', 'shape': (5, 4)}, 'keep', False, True),
    ('pad', {'border': (1, 2, 3, 4), 'fill': 7}, 'keep', False, False),
    ('pad', {'border': 2, 'mode': 'reflect'}, 'keep', False, False),
    ('put_on_background', {'background': np.full((12, 16, 3), 9, np.uint8), 'origin': 'random'}, 'keep', False, True),
    ('cutout', {'origin': 'random', 'shape': (3, 2), 'color': (1, 2, 3)}, 'keep', True, True),
    ('invert', {}, 'keep', True, False),
    ('invert', {'channels': [0, 2]}, 'keep', True, False),
    ('clip', {'low': 40, 'high': (200, 150, 100)}, 'keep', True, False),
    ('posterize', {'bits': 3}, 'keep', True, False),
    ('enhance', {'layout': 'hcbs', 'factor': (1.3, 0.8, 1.1, 2.0)}, 'keep', True, False),
    ('pil_convert', {'mode': 'L'}, 'keep', False, False),
    ('multiply', {'multiplier': (0.5, 1, 2)}, 'float', True, False),
    ('add', {'term': -3, 'clip': True}, 'float', True, False),
    ('normalize', {'mean': 100, 'std': (10, 20, 30)}, 'float', True, False),
    ('additive_noise', {'noise': ('normal', 0, 5)}, 'float', True, True),
    ('multiplicative_noise', {'noise': lambda size, rng: rng.uniform(0.9, 1.1, size)}, 'float', True, True),
    ('salt', {'p_noise': 0.1, 'size': 2}, 'keep', True, True),
    ('filter', {'mode': 'SHARPEN'}, 'keep', True, False),
    ('filter', {'mode': 'MedianFilter', 'size': 3}, 'keep', True, False),
    ('random_resized_crop', {'size': (8, 6)}, 'keep', False, True),
    ('random_resized_crop', {'size': 12, 'scale': (0.5, 1.0), 'mode': 'nearest'}, 'keep', False, True),
    ('center_crop', {'size': (9, 7)}, 'keep', False, False),
    ('center_crop', {'size': (16, 8)}, 'keep', False, False),
    ('color_jitter', {'brightness': 0.5, 'contrast': 0.5, 'saturation': 0.5, 'hue': 0.2}, 'keep', True, True),
    ('random_erasing', {'p': 1.0, 'scale': (0.1, 0.3), 'value': (9, 8, 7)}, 'keep', True, True),
]
TORCHVISION = [(name, kwargs) for name, kwargs, *_ in ACTIONS
               if name in ('random_resized_crop', 'center_crop', 'color_jitter', 'random_erasing')]
IDS = [f"{name}-{i}" for i, (name, *_) in enumerate(ACTIONS)]


def run(images, name, kwargs, seed=0, first=False, tensor=False):
    batch = make_batch(torch.from_numpy(images) if tensor else images, seed=seed)
    if first:
        batch.to_array(dtype=images.dtype)
    return getattr(batch, name)(**kwargs)


@pytest.mark.parametrize('name, kwargs, dtype, same_size, random', ACTIONS, ids=IDS)
@pytest.mark.parametrize('source', [np.uint8, np.float32])
def test_dtype_and_size(name, kwargs, dtype, same_size, random, source):
    images = random_images(dtype=source)
    out = run(images, name, kwargs).images
    expected = np.float32 if dtype == 'float' or source == np.float32 else np.uint8
    assert out.dtype == expected
    assert out.shape[0] == 4 and (out.shape == images.shape) == same_size


@pytest.mark.parametrize('name, kwargs, dtype, same_size, random', ACTIONS, ids=IDS)
def test_channels_first_gives_the_same_images(name, kwargs, dtype, same_size, random):
    images = random_images()
    last, first = run(images, name, kwargs), run(images, name, kwargs, first=True)
    assert 'images' in first._channels_first and first.images.flags['C_CONTIGUOUS']
    np.testing.assert_allclose(hwc(first), last.images, atol=1e-4)


@pytest.mark.parametrize('name, kwargs, dtype, same_size, random', ACTIONS, ids=IDS)
def test_torch_tensors_stay_tensors_with_the_same_values(name, kwargs, dtype, same_size, random):
    images = random_images()
    expected, out = run(images, name, kwargs).images, run(images, name, kwargs, tensor=True).images
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), expected, atol=1e-4)


@pytest.mark.parametrize('name, kwargs, dtype, same_size, random', ACTIONS, ids=IDS)
def test_p_zero_changes_nothing_and_p_one_changes_every_item(name, kwargs, dtype, same_size, random):
    images = random_images(dtype=np.float32)
    kept = run(images, name, {**kwargs, 'p': 0}).images
    assert np.array_equal(kept, images)
    changed = run(images, name, {**kwargs, 'p': 1.0}).images
    for before, after in zip(images, changed):
        assert before.shape != after.shape or not np.array_equal(before, after)


@pytest.mark.parametrize('name, kwargs, dtype, same_size, random', ACTIONS, ids=IDS)
def test_p_picks_items_from_the_seed(name, kwargs, dtype, same_size, random):
    images = random_images(n=16, dtype=np.float32)
    first = run(images, name, {**kwargs, 'p': 0.5}, seed=3).images
    again = run(images, name, {**kwargs, 'p': 0.5}, seed=3).images
    kept = [a.shape == b.shape and np.array_equal(a, b) for a, b in zip(first, images)]
    assert 0 < sum(kept) < 16
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    if random:
        other = run(images, name, kwargs, seed=4).images
        same = run(images, name, kwargs).images
        assert any(a.shape != b.shape or not np.array_equal(a, b) for a, b in zip(other, same))


@pytest.mark.parametrize('name, kwargs, dtype, same_size, random', [a for a in ACTIONS if not a[4]],
                         ids=[i for i, a in zip(IDS, ACTIONS) if not a[4]])
def test_mixed_shapes_give_what_each_image_gives_alone(name, kwargs, dtype, same_size, random):
    items = ragged((10, 14, 3), (12, 9, 3), (10, 14, 3))
    out = run(items, name, kwargs).images
    for item, result in zip(items, out):
        alone = run(item[None], name, kwargs).images[0]
        np.testing.assert_allclose(result, alone, atol=1e-4)


def test_per_item_arguments_reach_their_items():
    images = random_images(n=3)
    out = make_batch(images).rotate(PerItem([0, 90, 180])).images
    assert np.array_equal(out[0], images[0]) and np.array_equal(out[2], images[2, ::-1, ::-1])


def test_per_item_values_in_mixed_forms_mean_the_same_as_one_array():
    images = random_images(n=3)
    offsets = np.array([[1.0, 2.0], [3.0, 3.0], [0.5, -1.0]])
    mixed = PerItem([(1, 2), 3, np.array([0.5, -1.0])])      # a single number stands for both axes
    expected = make_batch(images).shift(PerItem(list(offsets))).images
    np.testing.assert_array_equal(make_batch(images).shift(mixed).images, expected)
    np.testing.assert_array_equal(make_batch(images).shift(PerItem(offsets)).images, expected)


@pytest.mark.parametrize('values', [[10.0, float('nan'), 5.0], [10, (1, 2), 5], [10, 'a', 5]],
                         ids=['nan', 'pair for a number', 'text'])
def test_a_bad_per_item_value_is_named(values):
    with pytest.raises(ValueError, match=r'Expected angle as .* per item\. Received: angle='):
        make_batch(random_images(n=3)).rotate(PerItem(values))


def seen_images(template, seed, prefetch):
    dataset = Dataset(24, batch_class=ImagesBatch, preloaded={'images': random_images(n=24), 'labels': np.arange(24)})
    pipeline = template << dataset
    pipeline.run(6, n_epochs=1, seed=seed, prefetch=prefetch)
    return pipeline.v('seen')


@pytest.mark.parametrize('name, kwargs', TORCHVISION, ids=[f"{name}-{i}" for i, (name, _) in enumerate(TORCHVISION)])
def test_torchvision_actions_are_lazy_and_the_same_whatever_the_prefetch(name, kwargs):
    template = getattr(Pipeline().init_variable('seen', []), name)(**kwargs) \
        .update(V('seen', mode='a'), B.images, use_lock=True)
    assert len(template.actions) == 3                       # declared, nothing ran
    reference = seen_images(template, 11, prefetch=0)
    assert len(reference) == 4
    for prefetch in (0, 3):
        again = seen_images(template, 11, prefetch)
        assert all(np.array_equal(a, b) for a, b in zip(reference, again))
    other = seen_images(template, 12, prefetch=0)
    random = name != 'center_crop'
    assert any(not np.array_equal(a, b) for a, b in zip(reference, other)) == random


class Stop(Exception):
    """The failure the resume test injects."""


STOP = {'at': None}


def stop_at(number):
    if number == STOP['at']:
        raise Stop(f'batch {number}')


def test_torchvision_actions_resume_to_the_images_of_the_uninterrupted_run(tmp_path):
    template = (Pipeline().init_variable('seen', []).call(stop_at, I('c'))
                .random_resized_crop(8).color_jitter(0.4, 0.4, 0.4, 0.1).random_erasing(p=0.5, value=(1, 2, 3))
                .update(V('seen', mode='a'), B.images))
    dataset = Dataset(24, batch_class=ImagesBatch, preloaded={'images': random_images(n=24), 'labels': np.arange(24)})
    run = {'batch_size': 6, 'n_epochs': 2, 'shuffle': 3, 'seed': 11}
    reference = template << dataset
    reference.run(**run)
    STOP['at'] = 5
    try:
        with pytest.raises(Stop):
            (template << dataset).run(**run, checkpoint=tmp_path)
    finally:
        STOP['at'] = None
    resumed = template << dataset
    resumed.run(**run, checkpoint=tmp_path, resume=True)
    assert len(reference.v('seen')) == len(resumed.v('seen')) == 8
    assert all(np.array_equal(a, b) for a, b in zip(reference.v('seen'), resumed.v('seen')))
