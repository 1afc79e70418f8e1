"""``ImageFolder(root)``: torchvision's class-folder layout as a labelled dataset in one line, and splits whose
parts are named (``split(train=0.8, validation=0.2)``)."""
import numpy as np
import pytest

from flowpipe import Dataset, DatasetIndex, ImageFolder, ImagesBatch

COLORS = {'cat': (255, 0, 0), 'dog': (0, 0, 255), 'owl': (0, 255, 0)}


def _channel(name):
    return int(np.argmax(COLORS[name]))


def _colors(batch):
    """The brightest channel of each image's corner pixel (the JPEG file's colour is close, not exact)."""
    return [int(np.argmax(image[0, 0])) for image in batch.images]


@pytest.fixture
def root(tmp_path):
    """``root/<class>/<file>``: 3 classes of 4, 3 and 2 images (names repeat across classes), a nested folder under
    ``owl``, and files ``ImageFolder`` skips: a text file, a hidden file and a hidden folder."""
    Image = pytest.importorskip('PIL.Image')
    counts = {'cat': 4, 'dog': 3, 'owl': 1}
    for label, count in counts.items():
        (tmp_path / label).mkdir()
        for number in range(count):
            Image.new('RGB', (5, 4), color=COLORS[label]).save(tmp_path / label / f'{number:03}.png')
    (tmp_path / 'owl' / 'night').mkdir()
    Image.new('RGB', (5, 4), color=COLORS['owl']).save(tmp_path / 'owl' / 'night' / '000.JPG')
    (tmp_path / 'cat' / 'notes.txt').write_text('not an image')
    (tmp_path / 'cat' / '.hidden.png').write_bytes(b'x')
    (tmp_path / '.ipynb_checkpoints').mkdir()
    return tmp_path


def test_image_folder_gives_labels_classes_and_lazily_loaded_images(root):
    dataset = ImageFolder(root)
    assert dataset.classes == ('cat', 'dog', 'owl') and dataset.num_classes == 3
    assert dataset.class_to_idx == {'cat': 0, 'dog': 1, 'owl': 2}
    assert dataset.indices.tolist() == ['cat/000.png', 'cat/001.png', 'cat/002.png', 'cat/003.png', 'dog/000.png',
                                        'dog/001.png', 'dog/002.png', 'owl/000.png', 'owl/night/000.JPG']
    assert dataset.labels.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2] and dataset.labels.dtype == np.int64
    assert dataset.batch_class is ImagesBatch and 'images' not in dataset.preloaded      # nothing read yet
    batch = dataset.p.load().next_batch(9, shuffle=3)
    assert batch.images.shape == (9, 4, 5, 3)
    assert _colors(batch) == [_channel(dataset.classes[label]) for label in batch.labels]


def test_the_classes_of_a_training_folder_label_another_folder_alike(root):
    only = ImageFolder(root, classes=['dog', 'cat'])
    assert only.classes == ('dog', 'cat') and only.num_classes == 2
    assert only.labels.tolist() == [1, 1, 1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match=r"no folder for \['fox'\].*classes="):
        ImageFolder(root, classes=['cat', 'fox'])


def test_a_missing_root_an_empty_root_and_an_empty_class_folder_are_named(root, tmp_path_factory):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        ImageFolder(root / 'nowhere')
    with pytest.raises(FileNotFoundError, match="Expected class folders"):
        ImageFolder(tmp_path_factory.mktemp('empty'))
    (root / 'emu').mkdir()
    with pytest.raises(ValueError, match=r"none in \['emu'\]"):
        ImageFolder(root)


def test_splits_of_an_image_folder_keep_their_labels_and_classes(root):
    dataset = ImageFolder(root)
    dataset.split(train=2 / 3, validation=1 / 3, shuffle=0)
    assert dataset.test is None and len(dataset.train) == 6 and len(dataset.validation) == 3
    assert dataset.validation.num_classes == 3 and dataset.validation.classes == dataset.classes
    by_id = dict(zip(dataset.indices, dataset.labels))
    assert dataset.validation.labels.tolist() == [by_id[item] for item in dataset.validation.indices]
    batch = dataset.validation.p.load().next_batch(3)
    assert _colors(batch) == [_channel(dataset.classes[label]) for label in batch.labels]


def test_split_parts_are_named_by_keyword():
    dataset = Dataset(10)
    dataset.split(train=0.8, validation=0.2)
    assert dataset.train.indices.tolist() == list(range(8)) and dataset.validation.indices.tolist() == [8, 9]
    assert dataset.test is None
    dataset.split(train=0.6, validation=0.2, test=0.2, shuffle=1)
    assert (len(dataset.train), len(dataset.validation), len(dataset.test)) == (6, 2, 2)
    parts = np.concatenate([dataset.train.indices, dataset.validation.indices, dataset.test.indices])
    assert sorted(parts.tolist()) == list(range(10))
    assert DatasetIndex(10).calc_split(train=0.7, test=0.3) == (7, 3, 0)
    # the positional form keeps batchflow's names: the hold-out part of split(0.8) is test
    dataset.split(0.8)
    assert len(dataset.test) == 2 and dataset.validation is None


def test_named_shares_that_leave_items_out_or_come_with_shares_are_refused():
    with pytest.raises(ValueError, match=r"summing to 1.*train=0.8, validation=0.1"):
        Dataset(10).split(train=0.8, validation=0.1)
    with pytest.raises(ValueError, match="not both"):
        Dataset(10).split(0.8, validation=0.2)
    with pytest.raises(TypeError, match="Expected validation to be a number"):
        Dataset(10).split(train=0.8, validation='0.2')
