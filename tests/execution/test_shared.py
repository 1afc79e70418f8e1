"""Arrays of a worker's result come back with their type, dtype, shape and layout; large ones in shared memory."""
import numpy as np
import pytest
import torch

from flowpipe.execution.shared import SHARED_MIN_BYTES, dumps_shared, loads_shared

LARGE = SHARED_MIN_BYTES // 4 + 7          # float32 items: just above the shared-memory threshold


def _strides(value):
    return value.strides if isinstance(value, np.ndarray) else value.stride()


def _arrays():
    base = np.arange(2 * 3 * LARGE, dtype=np.float32).reshape(2, 3, LARGE)
    images = torch.arange(4 * 3 * 32 * 32, dtype=torch.float32).reshape(4, 3, 32, 32)
    return {
        'c_order': base,
        'flipped': base[:, ::-1, ::-2],                              # negative strides, a view of a bigger array
        'fortran': np.asfortranarray(base),
        'small_flipped': np.arange(12, dtype=np.int16).reshape(3, 4)[::-1],
        'bools': np.arange(LARGE * 4) % 3 == 0,
        'channels_last': images.contiguous(memory_format=torch.channels_last),
        'transposed': images[:, 0].transpose(1, 2),
        'half': torch.ones(LARGE * 2, dtype=torch.float16),
        'small_labels': torch.arange(5),
        'offset_view': torch.arange(LARGE * 2, dtype=torch.float64)[LARGE:],
    }


@pytest.mark.parametrize('name', sorted(_arrays()))
def test_an_array_comes_back_with_its_type_dtype_shape_layout_and_values(name):
    sent = _arrays()[name]
    got = loads_shared(dumps_shared({'value': sent}))['value']
    assert type(got) is type(sent) and got.dtype == sent.dtype and tuple(got.shape) == tuple(sent.shape)
    assert _strides(got) == _strides(sent)
    assert (np.array_equal(got, sent) if isinstance(sent, np.ndarray) else torch.equal(got, sent))


def test_large_arrays_travel_in_shared_memory_and_small_ones_in_the_pickle():
    large, small = torch.zeros(LARGE), torch.zeros(8)
    payload = dumps_shared((large, small, large.numpy()))
    assert len(payload) < SHARED_MIN_BYTES       # the large ones are handles only
    got_large, got_small, got_numpy = loads_shared(payload)
    assert got_large.untyped_storage().is_shared() and not got_small.untyped_storage().is_shared()
    assert isinstance(got_numpy, np.ndarray) and got_numpy.flags.writeable


def test_what_cannot_be_shared_still_travels_by_pickle():
    with_grad = torch.ones(LARGE, requires_grad=True)
    objects = np.array([{'a': 1}, None], dtype=object)
    got_grad, got_objects, got_empty = loads_shared(dumps_shared((with_grad, objects, np.zeros((0, 3)))))
    assert got_grad.requires_grad and torch.equal(got_grad, with_grad)
    assert got_objects.tolist() == [{'a': 1}, None] and got_empty.shape == (0, 3)
