"""Components as torch groups and back; resize keeping the aspect ratio; dump; image actions on a GPU."""
import numpy as np
import pytest
import torch

from flowpipe.batch import images_data

from .image_cases import make_batch, ragged, random_images


def test_read_gives_nchw_views_and_write_restores_kind_and_layout():
    images = random_images()
    read = images_data.read(images, channels_first=False)
    (positions, tensor), = read.groups
    assert tensor.shape == (4, 3, 10, 14) and tensor.data_ptr() == images.ctypes.data and not read.as_torch
    back = images_data.write(read.groups, read, channels_first=False)
    assert isinstance(back, np.ndarray) and np.array_equal(back, images)
    tensors = images_data.read(torch.from_numpy(images.transpose(0, 3, 1, 2).copy()), channels_first=True)
    assert tensors.as_torch and isinstance(images_data.write(tensors.groups, tensors, True), torch.Tensor)


def test_ragged_components_group_by_shape_and_scatter_back():
    items = ragged((5, 6, 3), (7, 8, 3), (5, 6, 3))
    read = images_data.read(items, channels_first=False)
    assert sorted(len(positions) for positions, _ in read.groups) == [1, 2]
    back = images_data.write(read.groups, read, channels_first=False)
    assert back.dtype == object and all(np.array_equal(a, b) for a, b in zip(back, items))


def test_ragged_channels_last_groups_keep_channels_last_memory_and_resize_as_stacked_copies():
    items = ragged((40, 30, 3), (50, 20, 3), (40, 30, 3), (40, 30))
    read = images_data.read(items, channels_first=False)
    for positions, tensor in read.groups:
        assert tensor.is_contiguous(memory_format=torch.channels_last) or tensor.shape[1] == 1
        assert all(np.array_equal(tensor[k].permute(1, 2, 0).numpy().squeeze(), items[p])
                   for k, p in enumerate(positions))
    single = next(tensor for positions, tensor in read.groups if len(positions) == 1 and tensor.shape[1] == 3)
    assert single.data_ptr() == items[1].ctypes.data                        # one item: a view, no copy
    from flowpipe.batch.images_kernels import resize
    for positions, tensor in read.groups:                                  # the layout changes no value
        plain = torch.stack([torch.from_numpy(np.atleast_3d(items[p])).permute(2, 0, 1).contiguous()
                             for p in positions])
        assert torch.equal(resize(tensor, (17, 23)), resize(plain, (17, 23)))


def test_read_names_bad_shapes_and_dtypes():
    with pytest.raises(ValueError, match=r"\(N, C, H, W\) in component 'images'"):
        images_data.read(np.zeros((2, 3, 4)), channels_first=True)
    with pytest.raises(TypeError, match='uint8 or float'):
        images_data.read([np.array(['a'])], channels_first=False)


def test_read_only_arrays_are_read_without_a_warning(recwarn):
    images = random_images()
    images.flags.writeable = False
    assert make_batch(images).flip().images.shape == images.shape
    assert not [w for w in recwarn if 'writable' in str(w.message)]


def test_resize_with_one_side_keeps_the_aspect_ratio():
    out = make_batch(ragged((10, 20, 3), (30, 15, 3))).resize((10, None)).images
    assert [item.shape for item in out] == [(5, 10, 3), (20, 10, 3)]


def test_load_reads_in_memory_data_as_batch_load_and_files_with_fmt_image():
    images = random_images(n=6)
    batch = make_batch(images[:2])
    batch.load(src=images, dst='images')                  # rows at the batch's item ids 0 and 1
    assert np.array_equal(batch.images, images[:2])
    with pytest.raises(TypeError, match='FilesIndex'):
        make_batch(images).load(fmt='image')


def test_dump_writes_uint8_images(tmp_path):
    image_module = pytest.importorskip('PIL.Image')
    images = random_images(n=2)
    make_batch(images).dump(tmp_path, fmt='png')
    assert np.array_equal(np.asarray(image_module.open(tmp_path / '1.png')), images[1])
    with pytest.raises(ValueError, match='uint8'):
        make_batch(images.astype(np.float32)).dump(tmp_path)


@pytest.mark.gpu
def test_actions_on_cuda_tensors_stay_there_and_match_the_cpu():
    images = random_images(n=8, height=32, width=40)
    cpu = make_batch(images).rotate(20).scale(1.1, preserve_shape=True).shift((1.5, 2)).flip(p=0.5)
    cpu = cpu.elastic_transform(3, 4).pad(2).crop('center', (40, 32)).invert().filter('SHARPEN').images
    gpu = make_batch(torch.from_numpy(images).cuda()).rotate(20).scale(1.1, preserve_shape=True)
    gpu = gpu.shift((1.5, 2)).flip(p=0.5).elastic_transform(3, 4).pad(2).crop('center', (40, 32)).invert()
    gpu = gpu.filter('SHARPEN').images
    assert gpu.is_cuda and gpu.dtype == torch.uint8
    assert np.abs(gpu.cpu().numpy().astype(int) - cpu.astype(int)).max() <= 1


def test_importing_flowpipe_and_its_image_actions_does_not_import_torch():
    import subprocess
    import sys
    code = ("import sys, flowpipe; from flowpipe import ImagesBatch; ImagesBatch.action_names(); "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'False'


@pytest.mark.parametrize('source', [torch.float32, torch.float64])
@pytest.mark.parametrize('target', [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_cast_rounded_equals_torchs_conversion_and_keeps_the_layout(source, target):
    info = torch.iinfo(target)
    values = torch.randn(2, 3, 5, 4, dtype=source).mul_(300).round_().clamp_(info.min, info.max)
    values = values.contiguous(memory_format=torch.channels_last)
    out = images_data.cast_rounded(values, target)
    assert out.dtype == target and out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, values.to(target))


def test_cast_rounded_leaves_half_precision_and_autograd_to_torch():
    half = torch.tensor([1.0, 255.0], dtype=torch.bfloat16)
    assert torch.equal(images_data.cast_rounded(half, torch.uint8), torch.tensor([1, 255], dtype=torch.uint8))
    tracked = torch.tensor([3.0, 4.0], requires_grad=True)
    assert torch.equal(images_data.cast_rounded(tracked, torch.int16), torch.tensor([3, 4], dtype=torch.int16))


def test_dump_keeps_the_folders_of_relative_ids_and_never_overwrites_a_file(tmp_path):
    image_module = pytest.importorskip('PIL.Image')
    from flowpipe import ImagesBatch
    from flowpipe.data import FilesIndex
    images = random_images(n=2)
    for folder, image in zip(('cat', 'dog'), images):
        (tmp_path / 'src' / folder).mkdir(parents=True)
        image_module.fromarray(image).save(tmp_path / 'src' / folder / '001.png')
    index = FilesIndex(path=str(tmp_path / 'src' / '*' / '*.png'), ids='relative')
    batch = ImagesBatch(index).load(fmt='image')
    batch.dump(tmp_path / 'out')
    for folder, image in zip(('cat', 'dog'), images):
        assert np.array_equal(np.asarray(image_module.open(tmp_path / 'out' / folder / '001.png.png')), image)
    (tmp_path / 'out' / 'dog' / '001.png.png').write_bytes(b'a file of the user')
    with pytest.raises(FileExistsError, match='overwrite=True'):
        batch.dump(tmp_path / 'out')
    assert (tmp_path / 'out' / 'dog' / '001.png.png').read_bytes() == b'a file of the user'
    batch.dump(tmp_path / 'out', overwrite=True)
    assert np.array_equal(np.asarray(image_module.open(tmp_path / 'out' / 'dog' / '001.png.png')), images[1])


@pytest.mark.parametrize('size', [4, np.int64(4)])
def test_resize_with_an_int_sets_the_shorter_side_as_torchvisions_resize(size):
    # torchvision's Resize(4): the shorter side becomes 4, the longer int(4 * longer / shorter)
    out = make_batch(ragged((10, 15, 3), (15, 10, 3), (6, 6, 3))).resize(size).images
    assert [item.shape for item in out] == [(4, 6, 3), (6, 4, 3), (4, 4, 3)]
    assert make_batch(random_images(n=1, height=375, width=500)).resize(256).images.shape == (1, 256, 341, 3)


@pytest.mark.parametrize('size', [0, -3])
def test_resize_with_a_non_positive_int_names_the_shorter_side(size):
    with pytest.raises(ValueError, match=rf'positive int \(the shorter side\)\. Received: size={size}'):
        make_batch(random_images()).resize(size)
