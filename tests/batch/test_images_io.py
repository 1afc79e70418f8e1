"""``load()`` of image files: parallel decoding gives a plain Pillow decode's pixels; ``draft=`` is opt-in."""
import numpy as np
import pytest

from flowpipe.batch import ImagesBatch
from flowpipe.batch import decode_pool as pools
from flowpipe.batch.images_io import read_image, read_images

Image = pytest.importorskip('PIL.Image')


def smooth_image(seed, height, width):
    """An RGB image with large-scale structure, as photos have (JPEG's draft scaling keeps it)."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (height // 16 + 2, width // 16 + 2, 3), dtype=np.uint8)
    return Image.fromarray(coarse).resize((width, height), Image.BILINEAR)


def write_files(folder, sizes, modes=('RGB',), fmt='jpg'):
    files = []
    for i, (width, height) in enumerate(sizes):
        image = smooth_image(i, height, width).convert(modes[i % len(modes)])
        files.append(str(folder / f'{i:02d}.{fmt}'))
        image.save(files[-1])
    return files


def plain_decode(file):
    with Image.open(file) as image:
        return np.asarray(image.convert('RGB'))


def batch_of(folder, pattern):
    from flowpipe.data import FilesIndex
    index = FilesIndex(path=str(folder / pattern))
    return ImagesBatch(index)


@pytest.fixture(params=[1, 3], ids=['1 thread', '3 threads'])
def pool_of(request, monkeypatch):
    monkeypatch.setattr(pools, '_POOL', pools.DecodePool(request.param))
    return request.param


def test_load_gives_the_pixels_of_a_plain_pillow_decode(tmp_path, pool_of):
    files = write_files(tmp_path, [(40, 24)] * 7, modes=('RGB', 'L', 'CMYK'))
    batch = batch_of(tmp_path, '*.jpg').load()
    assert batch.images.shape == (7, 24, 40, 3) and batch.images.dtype == np.uint8
    assert np.array_equal(batch.images, np.stack([plain_decode(f) for f in sorted(files)]))


def test_load_of_other_formats_and_modes_converts_them_as_pillow_does(tmp_path, pool_of):
    files = write_files(tmp_path, [(9, 6)] * 4, modes=('RGBA', 'P', 'L', 'RGB'), fmt='png')
    images = batch_of(tmp_path, '*.png').load().images
    assert np.array_equal(images, np.stack([plain_decode(f) for f in sorted(files)]))


def test_load_of_different_sizes_gives_an_object_array_of_plain_decodes(tmp_path, pool_of):
    files = write_files(tmp_path, [(40, 24), (24, 40), (40, 24)])
    images = batch_of(tmp_path, '*.jpg').load().images
    assert images.dtype == object and len(images) == 3
    for image, file in zip(images, sorted(files)):
        assert image.dtype == np.uint8 and np.array_equal(image, plain_decode(file))


def test_a_bad_file_among_many_is_named_and_the_pool_stays_usable(tmp_path, pool_of):
    files = write_files(tmp_path, [(16, 16)] * 5)
    (tmp_path / '02b.jpg').write_bytes(b'not a jpeg')
    with pytest.raises(ValueError, match='02b.jpg'):
        read_images(sorted(str(path) for path in tmp_path.glob('*.jpg')))
    assert np.array_equal(read_images(files), np.stack([plain_decode(f) for f in files]))


def test_draft_decodes_a_jpeg_at_reduced_scale_close_to_the_full_decode(tmp_path):
    file, = write_files(tmp_path, [(640, 480)])
    drafted = read_image(file, draft=(224, 224))
    # 1/2 scale: the smallest of 1/2, 1/4, 1/8 that keeps both sides at least 224
    assert drafted.shape == (240, 320, 3) and drafted.dtype == np.uint8
    with Image.open(file) as image:
        full = np.asarray(image.convert('RGB').resize((320, 240), Image.BILINEAR, reducing_gap=None))
    assert np.abs(drafted.astype(int) - full).mean() < 3
    assert read_image(file, draft=(100, 50)).shape == (120, 160, 3)            # 1/4: 1/8 would give 80 < 100
    assert read_image(file, draft=(80, 60)).shape == (60, 80, 3)               # 1/8
    batch = batch_of(tmp_path, '*.jpg').load(draft=(224, 224))
    assert np.array_equal(batch.images[0], drafted)


def test_draft_changes_nothing_when_the_target_is_more_than_half_the_size_or_the_file_is_no_jpeg(tmp_path):
    jpeg, = write_files(tmp_path, [(320, 400)])
    png, = write_files(tmp_path, [(320, 400)], fmt='png')
    assert np.array_equal(read_image(jpeg, draft=(224, 224)), plain_decode(jpeg))
    assert np.array_equal(read_image(png, draft=(32, 32)), plain_decode(png))


@pytest.mark.parametrize('draft', [224, (224,), (0, 10), (1.5, 2), 'ab', (True, 2)])
def test_a_bad_draft_says_what_is_expected(tmp_path, draft):
    write_files(tmp_path, [(16, 16)])
    with pytest.raises(ValueError, match=r'Expected draft=\(width, height\)'):
        batch_of(tmp_path, '*.jpg').load(draft=draft)


def test_draft_with_data_that_are_not_image_files_is_refused():
    batch = ImagesBatch(np.arange(2))
    with pytest.raises(ValueError, match='draft= only when loading image files'):
        batch.load(src={'images': np.zeros((2, 4, 4, 3))}, draft=(2, 2))


def pipeline_images(folder, **options):
    from flowpipe.data import Dataset, FilesIndex
    from flowpipe.pipeline import Pipeline
    dataset = Dataset(FilesIndex(path=str(folder / '*.jpg')), batch_class=ImagesBatch)
    pipeline = Pipeline().load().resize((24, 24)).flip(p=0.5).to_array() << dataset
    return np.concatenate([batch.images for batch in pipeline.gen_batch(4, n_epochs=1, seed=7, **options)])


def test_a_pipeline_loads_the_same_arrays_with_and_without_prefetch(tmp_path):
    write_files(tmp_path, [(48, 40)] * 12)
    alone = pipeline_images(tmp_path)
    assert alone.shape == (12, 3, 24, 24) and np.array_equal(alone, pipeline_images(tmp_path, prefetch=2))


@pytest.mark.slow    # starts worker processes: run in CI or with FLOWPIPE_SLOW=1
def test_a_pipeline_loads_the_same_arrays_in_worker_processes(tmp_path):
    write_files(tmp_path, [(48, 40)] * 8)
    assert np.array_equal(pipeline_images(tmp_path), pipeline_images(tmp_path, prefetch=2, target='processes'))
