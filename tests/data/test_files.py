import os

import numpy as np
import pytest

from flowpipe.data import DatasetIndex, FilesIndex


@pytest.fixture
def folder(tmp_path):
    for name in ('b.png', 'a.png', 'c.jpg'):
        (tmp_path / name).write_bytes(b'x')
    (tmp_path / 'sub').mkdir()
    (tmp_path / 'sub' / 'd.png').write_bytes(b'x')
    return tmp_path


def test_ids_are_sorted_base_names(folder):
    index = FilesIndex(path=str(folder / '*.png'))
    assert list(index.indices) == ['a.png', 'b.png']
    assert index.get_fullpath('a.png') == str(folder / 'a.png')


def test_several_patterns_and_no_ext(folder):
    index = FilesIndex(path=[str(folder / '*.jpg'), str(folder / 'sub' / '*.png')], no_ext=True)
    assert list(index.indices) == ['c', 'd']
    assert index.get_fullpath('d') == str(folder / 'sub' / 'd.png')


def test_unsorted_keeps_pattern_order(folder):
    index = FilesIndex(path=[str(folder / '*.jpg'), str(folder / 'a.png')], sort=False)
    assert list(index.indices) == ['c.jpg', 'a.png']


def test_dirs(folder):
    index = FilesIndex(path=str(folder / '*'), dirs=True)
    assert list(index.indices) == ['sub']
    assert os.path.isdir(index.get_fullpath('sub'))


def test_subsets_and_batches_keep_paths(folder):
    index = FilesIndex(path=str(folder / '*.*'))
    batch = next(index.gen_batch(2, shuffle=1, n_iters=1))
    assert isinstance(batch, FilesIndex)
    assert all(batch.get_fullpath(name).endswith(name) for name in batch.indices)
    index.split(0.5)
    assert index.test.get_fullpath('c.jpg') == str(folder / 'c.jpg')


def test_no_match_is_an_empty_index_with_a_warning(folder):
    pattern = str(folder / '*.tif')
    with pytest.warns(UserWarning, match='matches no files') as info:
        index = FilesIndex(path=pattern)
    assert pattern in str(info[0].message)
    assert len(index) == 0 and isinstance(index.index, np.ndarray)
    with pytest.raises(ValueError, match='non-empty index'):
        index.next_batch(1)


def test_empty_pattern_list():
    with pytest.raises(ValueError, match=r'path=\[\]'):
        FilesIndex(path=[])


def test_from_index_and_paths(folder):
    paths = {'x': str(folder / 'a.png'), 'y': str(folder / 'b.png')}
    index = FilesIndex(index=DatasetIndex(['y', 'x']), paths=paths)
    assert list(index.indices) == ['y', 'x']
    assert index.get_fullpath('x') == paths['x']
    assert index.create_subset(['x']).get_fullpath('x') == paths['x']
    with pytest.raises(ValueError, match="no path for \\['z'\\]"):
        FilesIndex(index=['x', 'z'], paths=paths)
    with pytest.raises(TypeError, match='both arguments'):
        FilesIndex(index=['x'])


def test_same_name_in_two_folders(folder):
    (folder / 'sub' / 'a.png').write_bytes(b'x')
    with pytest.raises(ValueError, match="unique file names.*'a.png'"):
        FilesIndex(path=[str(folder / '*.png'), str(folder / 'sub' / '*.png')])


def test_unknown_id(folder):
    with pytest.raises(KeyError, match='zzz'):
        FilesIndex(path=str(folder / '*.png')).get_fullpath('zzz')


def test_bad_path_type():
    with pytest.raises(TypeError, match='glob pattern'):
        FilesIndex(path=3)


@pytest.fixture
def image_folder(tmp_path):
    """torchvision's ImageFolder layout: ``root/<class>/<file>``, with file names repeating across classes."""
    Image = pytest.importorskip('PIL.Image')
    colors = {'cat': (255, 0, 0), 'dog': (0, 0, 255)}
    for label, color in colors.items():
        (tmp_path / label).mkdir()
        for name, size in (('001.png', (4, 3)), ('002.png', (4, 3))):
            Image.new('RGB', size, color=color).save(tmp_path / label / name)
    return tmp_path


def test_class_folders_repeating_names_need_relative_ids(image_folder):
    pattern = str(image_folder / '*' / '*.png')
    with pytest.raises(ValueError, match="'001.png'.*ids='relative'"):
        FilesIndex(path=pattern)
    index = FilesIndex(path=pattern, ids='relative')
    assert list(index.indices) == ['cat/001.png', 'cat/002.png', 'dog/001.png', 'dog/002.png']
    assert index.get_fullpath('dog/001.png') == str(image_folder / 'dog' / '001.png')
    assert list(FilesIndex(path=pattern, ids='relative', no_ext=True).indices)[:2] == ['cat/001', 'cat/002']
    nested = FilesIndex(path=str(image_folder / '*'), dirs=True, ids='relative')
    assert list(nested.indices) == ['cat', 'dog']


def test_relative_ids_start_at_the_folder_all_patterns_share(image_folder, monkeypatch):
    patterns = [str(image_folder / 'cat' / '001.png'), str(image_folder / 'dog' / '*.png')]
    assert list(FilesIndex(path=patterns, ids='relative').indices) == ['cat/001.png', 'dog/001.png', 'dog/002.png']
    assert list(FilesIndex(path=patterns[0], ids='relative').indices) == ['001.png']
    monkeypatch.chdir(image_folder)
    index = FilesIndex(path='*/*.png', ids='relative')
    assert index.indices[0] == 'cat/001.png' and index.get_fullpath('cat/001.png') == os.path.join('cat', '001.png')


def test_unknown_ids_option(folder):
    with pytest.raises(ValueError, match=r"Expected ids to be one of \('name', 'relative'\). Received: ids='path'"):
        FilesIndex(path=str(folder / '*.png'), ids='path')


def test_folder_labels_as_image_folder_gives_them(image_folder):
    index = FilesIndex(path=str(image_folder / '*' / '*.png'), ids='relative')
    labels, classes = index.folder_labels()
    assert classes == ('cat', 'dog') and labels.tolist() == [0, 0, 1, 1] and labels.dtype == np.int64
    index.split(0.5, shuffle=3)
    test_labels, _ = index.test.folder_labels(classes)
    assert test_labels.tolist() == [classes.index(item.split('/')[0]) for item in index.test.indices]
    with pytest.raises(ValueError, match=r"parent folder among classes=\('cat',\).*\['dog'\]"):
        index.folder_labels(classes=('cat',))


def test_images_batch_loads_files_by_relative_ids_with_folder_labels(image_folder):
    from flowpipe import Dataset, ImagesBatch
    index = FilesIndex(path=str(image_folder / '*' / '*.png'), ids='relative')
    labels, classes = index.folder_labels()
    dataset = Dataset(index, batch_class=ImagesBatch, preloaded={'labels': labels}, classes=classes)
    batch = dataset.p.load().next_batch(4, shuffle=1)
    assert batch.images.shape == (4, 3, 4, 3)
    red = batch.images[:, 0, 0, 0] == 255
    assert red.tolist() == [item.startswith('cat/') for item in batch.indices]
    assert batch.labels.tolist() == [0 if is_red else 1 for is_red in red]
