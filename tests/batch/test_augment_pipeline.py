"""Augmentation in pipelines: per-item random arguments, one draw for images and masks, seeds and prefetch."""
import numpy as np
import pytest

from flowpipe import B, Dataset, ImagesBatch, P, Pipeline, R, V
from flowpipe.opensets import Digits


class MaskedBatch(ImagesBatch):
    components = ('images', 'masks', 'labels')


def masked_dataset(n=24):
    images = np.random.default_rng(0).integers(0, 256, (n, 12, 16, 3)).astype(np.uint8)
    return Dataset(n, batch_class=MaskedBatch, preloaded={'images': images, 'masks': images.copy(),
                                                          'labels': np.arange(n)})


def test_rotate_with_one_random_angle_per_item():
    batch = (Digits().train.p
             .rotate(angle=P(R('normal', 0, 30)))
             .next_batch(16, seed=3))
    raw = Digits().train.p.next_batch(16, seed=3)
    assert batch.images.shape == raw.images.shape == (16, 8, 8, 1) and batch.images.dtype == np.uint8
    assert sum(not np.array_equal(a, b) for a, b in zip(batch.images, raw.images)) >= 14


def test_salt_with_a_random_color_per_item_from_a_callable():
    def color(rng, size=None):
        return rng.integers(1, 255, size=size)
    batch = Digits().train.p.salt(p_noise=1.0, color=P(R(color))).next_batch(8, seed=0)
    colors = batch.images[:, 0, 0, 0]
    assert (batch.images == colors[:, None, None, None]).all() and len(set(colors.tolist())) > 1


def test_images_and_masks_move_together():
    pipeline = masked_dataset().p.rotate(P(R('uniform', -40, 40)), src=['images', 'masks'], p=0.5) \
        .crop('random', (10, 8), src=['images', 'masks']).flip(p=0.5, src=['images', 'masks']) \
        .shift(P(R('integers', -3, 4, size=2)), src=['images', 'masks'])
    batch = pipeline.next_batch(12, seed=1)
    assert batch.images.shape == (12, 8, 10, 3) and np.array_equal(batch.images, batch.masks)


def augmenting(dataset):
    return (dataset.p
            .init_variable('seen', [])
            .rotate(P(R('normal', 0, 15)), p=0.7)
            .scale(P(R('uniform', 0.8, 1.2)), preserve_shape=True)
            .shift(P(R('uniform', -2, 2, size=2)))
            .elastic_transform(2, 3, p=0.3)
            .additive_noise(('normal', 0, 4), clip=True, preserve_type=True)
            .salt(0.01, color=P(R('integers', 0, 256)))
            .flip(p=0.5)
            .cutout('random', P(R('integers', 2, 5)), 0, p=0.5)
            .update(V('seen', mode='a'), B.images, use_lock=True))


@pytest.mark.parametrize('prefetch', [0, 4])
def test_a_seeded_run_gives_the_same_images_whatever_the_prefetch(prefetch):
    reference = augmenting(masked_dataset())
    reference.run(6, n_epochs=1, seed=11, prefetch=0)
    again = augmenting(masked_dataset())
    again.run(6, n_epochs=1, seed=11, prefetch=prefetch)
    assert len(again.v('seen')) == 4
    assert all(np.array_equal(a, b) for a, b in zip(reference.v('seen'), again.v('seen')))
    other = augmenting(masked_dataset())
    other.run(6, n_epochs=1, seed=12, prefetch=prefetch)
    assert not np.array_equal(reference.v('seen')[0], other.v('seen')[0])


def test_augmentation_is_declared_lazily_and_names_are_checked():
    template = Pipeline().rotate(10).salt(0.1)
    assert len(template.actions) == 2
    with pytest.raises(Exception, match='rotat'):
        (template.rotat(10) << masked_dataset())
