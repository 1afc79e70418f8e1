"""MNIST, CIFAR10 and Imagenette320 read tiny files written in their publishers' formats."""
import gzip
import pickle
import struct
import tarfile

import numpy as np
import pytest

from flowpipe.opensets import CIFAR10, MNIST, Imagenette320
from flowpipe.opensets import fetch


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    def refuse(url, timeout=None):
        raise fetch.URLError('network is unreachable (test)')
    monkeypatch.setattr(fetch, 'urlopen', refuse)


def write_idx(file, array, gz=True):
    codes = {np.dtype(np.uint8): 0x08, np.dtype('>i4'): 0x0C}
    header = bytes([0, 0, codes[array.dtype], array.ndim]) + struct.pack(f'>{array.ndim}I', *array.shape)
    opener = gzip.open if gz else open
    with opener(file, 'wb') as out:
        out.write(header + array.tobytes())


def make_mnist(folder, gz=True, n_train=6, n_test=4):
    rng = np.random.default_rng(0)
    arrays = {'train-images-idx3-ubyte': rng.integers(0, 256, (n_train, 28, 28)).astype(np.uint8),
              'train-labels-idx1-ubyte': rng.integers(0, 10, n_train).astype(np.uint8),
              't10k-images-idx3-ubyte': rng.integers(0, 256, (n_test, 28, 28)).astype(np.uint8),
              't10k-labels-idx1-ubyte': rng.integers(0, 10, n_test).astype(np.uint8)}
    for name, array in arrays.items():
        write_idx(folder / (name + ('.gz' if gz else '')), array, gz)
    return arrays


@pytest.mark.parametrize('gz', [True, False])
def test_mnist_reads_idx_files(tmp_path, gz):
    arrays = make_mnist(tmp_path, gz)
    mnist = MNIST(path=tmp_path, bar=True)
    assert (len(mnist.train), len(mnist.test), mnist.num_classes) == (6, 4, 10)
    images = mnist.train.component('images')
    assert images.shape == (6, 28, 28, 1) and images.dtype == np.uint8
    assert np.array_equal(images[..., 0], arrays['train-images-idx3-ubyte'])
    assert np.array_equal(mnist.test.component('labels'), arrays['t10k-labels-idx1-ubyte'])
    assert mnist.test.component('labels').dtype == np.int64
    batch = mnist.train.next_batch(3).resize((32, 32)).to_array()
    assert batch.image_shape == (1, 32, 32)


def test_mnist_truncated_file_is_named(tmp_path):
    make_mnist(tmp_path)
    with gzip.open(tmp_path / 'train-images-idx3-ubyte.gz', 'rb') as src:
        data = src.read()
    with gzip.open(tmp_path / 'train-images-idx3-ubyte.gz', 'wb') as out:
        out.write(data[:-10])
    with pytest.raises(ValueError, match='train-images-idx3-ubyte.gz.*truncated'):
        MNIST(path=tmp_path)


def test_mnist_foreign_file_is_named(tmp_path):
    make_mnist(tmp_path, gz=False)
    (tmp_path / 't10k-labels-idx1-ubyte').write_bytes(b'<html>not found</html>')
    with pytest.raises(ValueError, match='t10k-labels-idx1-ubyte.*idx header'):
        MNIST(path=tmp_path)


def test_mnist_label_count_mismatch(tmp_path):
    make_mnist(tmp_path)
    write_idx(tmp_path / 't10k-labels-idx1-ubyte.gz', np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match='as many labels as images'):
        MNIST(path=tmp_path)


def test_mnist_offline_says_which_files_go_where(tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        MNIST(path=tmp_path / 'mnist')
    message = str(error.value)
    assert 'network is unreachable' in message and str(tmp_path / 'mnist') in message
    for name in ('train-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz'):
        assert name in message
    assert not any((tmp_path / 'mnist').glob('*.part'))


def test_mnist_downloads_missing_files(tmp_path, monkeypatch):
    source = tmp_path / 'source'
    source.mkdir()
    arrays = make_mnist(source)
    requested = []

    def serve(url, timeout=None):
        requested.append(url)
        return open(source / url.rsplit('/', 1)[1], 'rb')
    monkeypatch.setattr(fetch, 'urlopen', serve)
    target = tmp_path / 'cache'
    mnist = MNIST(path=target, bar=True)
    assert len(requested) == 4 and all(url.startswith('https://') for url in requested)
    assert np.array_equal(mnist.train.component('images')[..., 0], arrays['train-images-idx3-ubyte'])
    assert sorted(p.name for p in target.iterdir()) == sorted(f'{name}.gz' for name in arrays)


def test_default_folder_follows_flowpipe_data(tmp_path, monkeypatch):
    from flowpipe.opensets.base import data_folder
    monkeypatch.setenv('FLOWPIPE_DATA', str(tmp_path))
    assert data_folder('mnist') == tmp_path / 'mnist'
    (tmp_path / 'mnist').mkdir()
    make_mnist(tmp_path / 'mnist')
    assert MNIST().path == tmp_path / 'mnist'
    monkeypatch.delenv('FLOWPIPE_DATA')
    assert data_folder('mnist').parts[-3:] == ('.cache', 'flowpipe', 'mnist')


# --- CIFAR10 -------------------------------------------------------------------------------------------------

def make_cifar_folder(folder, per_batch=3):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    contents = {}
    for name in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
        content = {b'batch_label': name.encode(), b'labels': [int(v) for v in rng.integers(0, 10, per_batch)],
                   b'data': rng.integers(0, 256, (per_batch, 3072)).astype(np.uint8),
                   b'filenames': [b'x.png'] * per_batch}
        with open(folder / name, 'wb') as out:
            pickle.dump(content, out, protocol=2)
        contents[name] = content
    return contents


def test_cifar_reads_pickle_batches_from_the_folder(tmp_path):
    contents = make_cifar_folder(tmp_path / 'cifar-10-batches-py')
    cifar = CIFAR10(path=tmp_path, bar=True)
    assert (len(cifar.train), len(cifar.test), cifar.num_classes) == (15, 3, 10)
    images = cifar.test.component('images')
    assert images.shape == (3, 32, 32, 3) and images.dtype == np.uint8
    first = contents['test_batch'][b'data'][0]
    assert np.array_equal(images[0, :, :, 0], first[:1024].reshape(32, 32))  # red plane first
    assert np.array_equal(images[0, 5, 7], first[[5 * 32 + 7, 1024 + 5 * 32 + 7, 2048 + 5 * 32 + 7]])
    assert list(cifar.test.component('labels')) == contents['test_batch'][b'labels']
    assert cifar.classes[0] == 'airplane'


def test_cifar_reads_the_tar_gz_without_extracting(tmp_path):
    make_cifar_folder(tmp_path / 'build' / 'cifar-10-batches-py')
    with tarfile.open(tmp_path / 'cifar-10-python.tar.gz', 'w:gz') as tar:
        tar.add(tmp_path / 'build' / 'cifar-10-batches-py', arcname='cifar-10-batches-py')
    cifar = CIFAR10(path=tmp_path)
    assert len(cifar.train) == 15
    assert not (tmp_path / 'cifar-10-batches-py').exists()


def test_cifar_refuses_pickles_that_call_code(tmp_path):
    make_cifar_folder(tmp_path)

    class Evil:
        def __reduce__(self):
            return (print, ('pwned',))
    with open(tmp_path / 'data_batch_3', 'wb') as out:
        pickle.dump({b'data': Evil(), b'labels': []}, out)
    with pytest.raises(ValueError, match='data_batch_3.*not allowed'):
        CIFAR10(path=tmp_path)


def test_cifar_missing_batch_and_corrupt_archive_are_named(tmp_path):
    make_cifar_folder(tmp_path)
    (tmp_path / 'data_batch_2').unlink()
    with pytest.raises(FileNotFoundError, match='data_batch_2'):
        CIFAR10(path=tmp_path)
    other = tmp_path / 'other'
    other.mkdir()
    (other / 'cifar-10-python.tar.gz').write_bytes(b'not gzip')
    with pytest.raises(ValueError, match='cifar-10-python.tar.gz'):
        CIFAR10(path=other)


def test_cifar_offline_names_the_archive_and_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match='cifar-10-python.tar.gz'):
        CIFAR10(path=tmp_path)


# --- Imagenette ----------------------------------------------------------------------------------------------

def make_imagenette(root, sizes=((40, 30), (30, 40))):
    image_module = pytest.importorskip('PIL.Image')
    rng = np.random.default_rng(2)
    for split, wnids in (('train', ('n01440764', 'n03888605')), ('val', ('n02102040',))):
        for wnid in wnids:
            (root / split / wnid).mkdir(parents=True)
            for i, (width, height) in enumerate(sizes):
                pixels = rng.integers(0, 256, (height, width, 3)).astype(np.uint8)
                image_module.fromarray(pixels).save(root / split / wnid / f'{wnid}_{i}.JPEG')
    image_module.fromarray(np.zeros((20, 20), np.uint8)).save(root / 'val' / 'n02102040' / 'grey.JPEG')


def test_imagenette_reads_class_folders(tmp_path):
    make_imagenette(tmp_path / 'imagenette2-320')
    dataset = Imagenette320(path=tmp_path, bar=True)
    assert (len(dataset.train), len(dataset.test), dataset.num_classes) == (4, 3, 10)
    assert list(dataset.train.component('labels')) == [0, 0, 9, 9]
    assert list(dataset.test.component('labels')) == [1, 1, 1]
    assert dataset.classes[9] == 'parachute'
    images = dataset.test.component('images')
    assert images.dtype == object and {image.shape for image in images} == {(30, 40, 3), (40, 30, 3), (20, 20, 3)}
    batch = dataset.train.next_batch(4).resize((16, 16)).to_array()
    assert batch.images.shape == (4, 3, 16, 16)


def test_imagenette_extracts_the_archive_then_deletes_it(tmp_path):
    make_imagenette(tmp_path / 'build' / 'imagenette2-320')
    target = tmp_path / 'data'
    target.mkdir()
    with tarfile.open(target / 'imagenette2-320.tgz', 'w:gz') as tar:
        tar.add(tmp_path / 'build' / 'imagenette2-320', arcname='imagenette2-320')
    dataset = Imagenette320(path=target)
    assert len(dataset.train) == 4
    assert sorted(p.name for p in target.iterdir()) == ['imagenette2-320']


def test_imagenette_corrupt_image_and_unknown_class_are_named(tmp_path):
    make_imagenette(tmp_path)
    (tmp_path / 'train' / 'n01440764' / 'n01440764_0.JPEG').write_bytes(b'broken')
    with pytest.raises(ValueError, match='n01440764_0.JPEG'):
        Imagenette320(path=tmp_path)
    (tmp_path / 'train' / 'n01440764' / 'n01440764_0.JPEG').unlink()
    (tmp_path / 'val' / 'cats').mkdir()
    with pytest.raises(ValueError, match='cats'):
        Imagenette320(path=tmp_path)


def test_imagenette_offline_message(tmp_path):
    pytest.importorskip('PIL')
    with pytest.raises(FileNotFoundError, match='imagenette2-320.tgz'):
        Imagenette320(path=tmp_path)


def test_imagenette_without_pillow_says_how_to_install(tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, 'PIL', None)
    with pytest.raises(ImportError, match='pip install pillow'):
        Imagenette320(path=tmp_path)
