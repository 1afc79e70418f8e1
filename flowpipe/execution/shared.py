"""Results of worker processes that carry their arrays in shared memory instead of in the pickle.

``dumps_shared(obj)`` pickles ``obj`` with dill, except that every numpy array and every plain CPU tensor of at
least ``SHARED_MIN_BYTES`` is written once into a shared-memory block (torch's ``file_descriptor`` strategy: the
block has no name in ``/dev/shm``, and lives as long as some process maps it); the pickle carries only a handle.
``loads_shared`` maps the blocks in the caller: the arrays come back without a copy, each with its type (numpy
stays numpy, a tensor stays a tensor), dtype, shape, strides and storage offset, so a channels-last tensor or a
flipped (negative-stride) array keeps its layout. Smaller arrays travel as bytes, with the same layout.

``fingerprint(obj)`` is a digest of what ``dill`` writes for ``obj``, its large arrays hashed where they lie
instead of copied into a pickle: a worker's copy of an object (a pipeline's dataset) is current while its
fingerprint is the one it was sent with.
"""
from __future__ import annotations

import hashlib
import io
from typing import Any

import dill
import numpy as np

__all__ = ['SHARED_MIN_BYTES', 'dumps_shared', 'fingerprint', 'loads_shared']

# Below this, mapping a block (a file descriptor passed over a socket) costs more than copying the bytes.
SHARED_MIN_BYTES = 64 * 1024


def dumps_shared(obj: Any) -> bytes:
    """``obj`` pickled with dill, its large arrays and tensors in shared memory (see the module docstring)."""
    buffer = io.BytesIO()
    _SharedPickler(buffer).dump(obj)
    return buffer.getvalue()


def loads_shared(payload: bytes) -> Any:
    """The object of a ``dumps_shared`` payload; its arrays map the shared blocks."""
    return dill.loads(payload)


def fingerprint(obj: Any) -> bytes:
    """A SHA-1 digest of everything ``dill.dumps(obj, recurse=True)`` writes, numpy arrays and CPU tensors of at
    least ``SHARED_MIN_BYTES`` hashed in place (their bytes, dtype, shape and strides) rather than copied: one pass
    over the data. Any change to what ``obj`` pickles to changes it (barring a SHA-1 collision); equal objects
    may differ (a set pickled in another order), which only costs a resend."""
    digest = hashlib.sha1()
    _HashingPickler(_DigestFile(digest), digest).dump(obj)
    return digest.digest()


class _DigestFile:
    def __init__(self, digest: Any):
        self.write = digest.update


class _HashingPickler(dill.Pickler):
    def __init__(self, file: Any, digest: Any):
        super().__init__(file, recurse=True)
        self.digest = digest

    def reducer_override(self, obj: Any) -> Any:
        array = obj if type(obj) is np.ndarray and obj.dtype.kind not in 'OV' else None
        torch = _torch()
        if array is None and torch is not None and type(obj) is torch.Tensor and _plain(obj):
            try:
                array = obj.numpy()
            except TypeError:               # a dtype numpy lacks (bfloat16): pickled as it is
                return NotImplemented
        if array is None or array.nbytes < SHARED_MIN_BYTES:
            return NotImplemented
        self.digest.update(np.ascontiguousarray(array).data)
        return _hashed_array, (type(obj).__name__, array.dtype.str, array.shape, array.strides)


def _hashed_array(*layout: Any) -> None:
    """Stands for an array in a fingerprint (never unpickled)."""


class _SharedPickler(dill.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is np.ndarray and obj.dtype.kind not in 'OV' and obj.size:
            return _reduce_array(obj)
        torch = _torch()
        if torch is not None and type(obj) is torch.Tensor and _plain(obj):
            return _reduce_tensor(obj)
        return NotImplemented


def _torch() -> Any:
    """torch, where the object being pickled could be a tensor at all (``import flowpipe`` stays light)."""
    import sys
    return sys.modules.get('torch')


def _plain(tensor: Any) -> bool:
    import torch
    return (tensor.device.type == 'cpu' and tensor.layout == torch.strided and not tensor.requires_grad
            and not tensor.is_quantized and tensor.numel() > 0 and not tensor.is_conj() and not tensor.is_neg())


def _span(shape: tuple, strides: tuple, itemsize: int) -> tuple[int, int]:
    """``(low, high)``: the byte range an array of this layout reaches, relative to its first element."""
    low = sum(min(0, stride * (size - 1)) for size, stride in zip(shape, strides))
    high = sum(max(0, stride * (size - 1)) for size, stride in zip(shape, strides)) + itemsize
    return low, high


def _reduce_array(array: np.ndarray) -> tuple:
    low, high = _span(array.shape, array.strides, array.itemsize)
    block = _block(high - low)
    np.ndarray(array.shape, array.dtype, buffer=block.array(), offset=-low, strides=array.strides)[...] = array
    return _rebuild_array, (block, array.dtype, array.shape, array.strides, -low)


def _reduce_tensor(tensor: Any) -> tuple:
    # Element strides are never negative: the block starts at the first element.
    _, high = _span(tuple(tensor.shape), tensor.stride(), 1)
    block = _block(high * tensor.element_size())
    _tensor(block, tensor.dtype, tuple(tensor.shape), tensor.stride()).copy_(tensor)
    return _rebuild_tensor, (block, tensor.dtype, tuple(tensor.shape), tensor.stride())


def _block(nbytes: int) -> _Bytes | _Shared:
    """A shared block when ``nbytes`` is large, else bytes that go in the pickle."""
    if nbytes < SHARED_MIN_BYTES:
        return _Bytes(bytearray(nbytes))
    import torch
    return _Shared(torch.UntypedStorage._new_shared(nbytes))


class _Bytes:
    """A small block: its bytes go in the pickle."""

    def __init__(self, data: bytearray):
        self.data = data

    def array(self) -> np.ndarray:
        return np.frombuffer(self.data, np.uint8)

    def storage(self) -> Any:
        import torch
        return torch.frombuffer(self.data, dtype=torch.uint8).untyped_storage()


class _Shared:
    """A shared block: the pickle carries torch's handle (a descriptor the caller fetches from the worker)."""

    def __init__(self, storage: Any):
        self._storage = storage

    def __reduce__(self) -> tuple:
        from torch.multiprocessing.reductions import reduce_storage
        rebuild, args = reduce_storage(self._storage)
        return _open_shared, (rebuild, args)

    def array(self) -> np.ndarray:
        import torch
        return torch.empty(0, dtype=torch.uint8).set_(self._storage).numpy()

    def storage(self) -> Any:
        return self._storage


def _open_shared(rebuild: Any, args: tuple) -> _Shared:
    return _Shared(rebuild(*args))


def _tensor(block: _Bytes | _Shared, dtype: Any, shape: tuple, strides: tuple) -> Any:
    import torch
    return torch.empty(0, dtype=dtype).set_(block.storage(), 0, shape, strides)


def _rebuild_array(block: _Bytes | _Shared, dtype: np.dtype, shape: tuple, strides: tuple, offset: int) -> np.ndarray:
    return np.ndarray(shape, dtype, buffer=block.array(), offset=offset, strides=strides)


def _rebuild_tensor(block: _Bytes | _Shared, dtype: Any, shape: tuple, strides: tuple) -> Any:
    return _tensor(block, dtype, shape, strides)
