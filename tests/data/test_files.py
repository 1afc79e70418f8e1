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
