"""Digits: the shipped data, its fixed split, and its use with ImagesBatch."""
import gzip

import numpy as np
import pytest

from flowpipe.batch import ImagesBatch
from flowpipe.opensets import Digits


@pytest.fixture(scope='module')
def digits():
    return Digits()


def test_sizes_dtypes_and_attributes(digits):
    assert (len(digits.train), len(digits.test)) == (1437, 360)
    assert digits.num_classes == 10 and digits.train.num_classes == 10 and digits.test.num_classes == 10
    images = digits.train.component('images')
    assert images.shape == (1437, 8, 8, 1) and images.dtype == np.uint8
    assert images.max() == 255 and images.min() == 0
    assert set(digits.train.component('labels')) == set(range(10))
    assert digits.train.batch_class is ImagesBatch


def test_split_is_fixed_and_a_partition_of_the_source(digits):
    from flowpipe.opensets.digits import _SHIPPED, read_digits
    again = Digits()
    assert np.array_equal(digits.test.component('images'), again.test.component('images'))
    images, labels = read_digits(_SHIPPED)
    rows = lambda imgs, lbls: sorted(i.tobytes() + bytes([l]) for i, l in zip(imgs, lbls))
    split = [(d.component('images'), d.component('labels')) for d in (digits.train, digits.test)]
    assert rows(np.concatenate([s[0] for s in split]), np.concatenate([s[1] for s in split])) == rows(images, labels)
    assert not np.array_equal(digits.test.component('labels'), labels[-360:])  # shuffled, not the file's tail


def test_first_item_matches_the_source_file(digits, tmp_path):
    from flowpipe.opensets.digits import _SHIPPED, read_digits
    images, labels = read_digits(_SHIPPED)
    with gzip.open(_SHIPPED, 'rt') as text:
        first = [int(v) for v in text.readline().split(',')]
    assert labels[0] == first[64]
    assert np.array_equal(images[0, :, :, 0], np.rint(np.array(first[:64]).reshape(8, 8) * 255 / 16))


def test_batch_resize_to_array_and_image_shape(digits):
    batch = digits.train.next_batch(16)
    assert batch.image_shape == (8, 8, 1)
    batch.resize((32, 32)).to_array()
    assert batch.images.shape == (16, 1, 32, 32) and batch.images.dtype == np.float32
    assert batch.image_shape == (1, 32, 32)


def test_path_to_a_folder_without_the_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match='digits.csv.gz'):
        Digits(path=tmp_path)


def test_corrupt_file_is_named(tmp_path):
    (tmp_path / 'digits.csv.gz').write_bytes(b'garbage')
    with pytest.raises(ValueError, match='digits.csv.gz'):
        Digits(path=tmp_path)
    with gzip.open(tmp_path / 'digits.csv.gz', 'wt') as text:
        text.write('1,2,3\n')
    with pytest.raises(ValueError, match='corrupt'):
        Digits(path=tmp_path)


def test_repr_and_bar(digits):
    assert 'train=1437' in repr(digits)
    assert len(Digits(bar=True).train) == 1437


def test_pipeline_resize_to_array_and_reproducible_augmentation(digits):
    from flowpipe.expr import B, V
    from flowpipe.pipeline import Pipeline

    def make():
        return (Pipeline().init_variable('shapes', []).init_variable('images', [])
                .crop('random', (6, 6)).flip(p=0.5).rotate((-15, 15), p=0.5)
                .resize((32, 32)).to_array()
                .update(V('shapes', mode='a'), B.image_shape)
                .update(V('images', mode='a'), B.images, use_lock=True)) << digits.train
    plain, prefetched = make(), make()
    plain.run(100, n_iters=4, shuffle=3)
    prefetched.run(100, n_iters=4, shuffle=3, prefetch=2)
    assert plain.v('shapes') == [(1, 32, 32)] * 4
    assert all(np.array_equal(a, b) for a, b in zip(plain.v('images'), prefetched.v('images')))
    seeded = [make(), make()]
    for pipeline, seed in zip(seeded, (1, 2)):  # same items, different augmentation draws
        pipeline.run(100, n_iters=1, shuffle=False, seed=seed)
    assert not np.array_equal(seeded[0].v('images')[0], seeded[1].v('images')[0])


def test_batch_class_and_batchflow_bar_forms():
    from flowpipe import ImagesBatch

    class Patches(ImagesBatch):
        components = ('images', 'labels', 'patches')

    digits = Digits(batch_class=Patches, path=None, bar='t')
    batch = digits.train.next_batch(2)
    assert isinstance(batch, Patches) and batch.patches is None
    with pytest.raises(TypeError, match='ImagesBatch or a subclass'):
        Digits(batch_class=dict)
