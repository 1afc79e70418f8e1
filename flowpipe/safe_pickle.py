"""Reading flowpipe's pickled files (model files, export metadata, run checkpoints) without running their code.

A pickle names the functions and classes that rebuild its objects, and unpickling calls them: a file from someone
else can name ``os.system``, or carry a function's code (dill pickles lambdas and local classes by value). The safe
reader (``load(file)``, the default everywhere flowpipe reads such a file) calls only what rebuilds data:

- containers and scalars (``dict``, ``list``, ``tuple``, ``set``, ``OrderedDict``, ``complex``...);
- tensors, parameters, ``torch.Size``, dtypes, devices, numpy arrays and scalars (a tensor's storage is read by
  ``torch.load(..., weights_only=True)``);
- classes of installed torch and flowpipe code that hold a model: ``nn.Module`` subclasses of ``torch.nn`` and of
  flowpipe (the layers of a ready network built from them), flowpipe's model classes, its model callbacks
  (``ReduceLROnPlateau``, ``EarlyStopping``..., with their ``Plateau`` rule) and its ``Config``; a research's
  configs (``ConfigAlias``, ``Alias`` of ``flowpipe.research.domain``: the records of ``flowpipe.research``); and
  the functions of ``torch.nn.functional`` (a loss given as a function).

Anything else (a class of the user's own code, ``__main__``, any other module, a function stored by value) is
refused with ``UnsafeFileError`` before it is imported or called, naming it and the way to open the file anyway:
``trusted=True``, which reads the file with dill and so runs whatever it holds. As torch ≥ 2.6 does with
``torch.load(weights_only=True)``, flowpipe reads safely unless told the file is trusted.
"""
from __future__ import annotations

import io
import pickle
from typing import IO, Any

import dill

from .errors import UnsafeFileError

__all__ = ['UnsafeFileError', 'load', 'refused_global', 'unsafe']

# torch's own tensor rebuild functions, those its weights_only loader allows
_TORCH_REBUILDS = ('_rebuild_tensor', '_rebuild_tensor_v2', '_rebuild_tensor_v3', '_rebuild_parameter',
                   '_rebuild_parameter_with_state', '_rebuild_qtensor', '_rebuild_sparse_tensor',
                   '_rebuild_meta_tensor_no_storage', '_rebuild_nested_tensor', '_rebuild_wrapper_subclass',
                   '_rebuild_device_tensor_from_numpy', '_rebuild_device_tensor_from_cpu_tensor')
_BUILTINS = {'dict', 'list', 'tuple', 'set', 'frozenset', 'slice', 'complex', 'bytearray', 'bytes', 'int', 'float',
             'str', 'bool', 'range', 'object'}
_ALLOWED = {('collections', name) for name in ('OrderedDict', 'defaultdict', 'deque', 'Counter')} | {
    ('builtins', name) for name in _BUILTINS} | {('__builtin__', name) for name in _BUILTINS} | {
    ('copyreg', '_reconstructor'), ('_codecs', 'encode'),
    *(('torch._utils', name) for name in _TORCH_REBUILDS), ('torch._tensor', '_rebuild_from_type_v2'),
    ('torch.serialization', '_get_layout'), ('torch', 'Size'), ('torch', 'device'), ('torch', 'Tensor'), ('torch.nn.parameter', 'Parameter'),
    ('torch.torch_version', 'TorchVersion'),
    ('numpy', 'ndarray'), ('numpy', 'dtype'), ('numpy.core.multiarray', '_reconstruct'),
    ('numpy.core.multiarray', 'scalar'), ('numpy._core.multiarray', '_reconstruct'), ('numpy._core.multiarray', 'scalar')}
_NUMPY_DTYPES = ('numpy.dtypes',)


def _storage_from_bytes(data: bytes) -> Any:
    """A tensor's storage as dill wrote it (``torch.save`` bytes), read by torch's own safe loader."""
    import torch
    return torch.load(io.BytesIO(data), weights_only=True)


def _array(make: Any, args: tuple, state: tuple, attributes: dict | None = None) -> Any:
    """A numpy array as dill writes it: numpy's own ``_reconstruct`` and the array's state, nothing else."""
    import numpy
    if getattr(make, '__name__', None) != '_reconstruct' or not getattr(make, '__module__', '').startswith('numpy'):
        raise UnsafeFileError(f'dill._dill._create_array with {make!r}')
    array = make(*args)
    if not isinstance(array, numpy.ndarray):
        raise UnsafeFileError(f'dill._dill._create_array making {type(array).__name__}')
    array.__setstate__(state)
    if attributes:
        raise UnsafeFileError('dill._dill._create_array with attributes (an ndarray subclass)')
    return array


_REPLACED = {('torch.storage', '_load_from_bytes'): _storage_from_bytes, ('dill._dill', '_create_array'): _array}


def _allowed_object(module: str, value: Any) -> bool:
    """Whether a global of installed torch or flowpipe code only rebuilds data or a model when called."""
    import torch
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return True
    if module == 'torch.nn.functional':
        return callable(value) and getattr(value, '__module__', None) == 'torch.nn.functional'
    if not isinstance(value, type):
        return False
    if issubclass(value, torch.nn.Module):     # not torch.nn.parallel's wrappers: they join process groups
        return module.startswith(('torch.nn.', 'flowpipe.')) and not module.startswith('torch.nn.parallel')
    if module == 'flowpipe.research.domain':       # a research record's config: values with printable names
        from .research.domain import Alias, ConfigAlias
        return value in (Alias, ConfigAlias)
    if module.startswith('flowpipe.'):
        from .config import Config
        from .expr.special import PerItem
        from .callbacks.plateau import Plateau
        from .models.torch.callbacks import BaseCallback
        from .models.torch.model import TorchModel
        return issubclass(value, (TorchModel, Config, PerItem)) or value is Plateau or (
            issubclass(value, BaseCallback) and module in ('flowpipe.models.torch.callbacks',
                                                           'flowpipe.callbacks.early_stopping'))
    return False


def refused_global(module: str, name: str) -> bool:
    """Whether the safe reader refuses the global ``module.name`` (importing only torch, numpy or flowpipe)."""
    if (module, name) in _ALLOWED or (module, name) in _REPLACED:
        return False
    if module.startswith(_NUMPY_DTYPES) and '.' not in name:
        return False
    if '.' in name or module.split('.')[0] not in ('torch', 'flowpipe'):
        return True
    try:
        value = pickle.Unpickler.find_class(_NULL, module, name)
    except (ImportError, AttributeError):
        return True
    return not _allowed_object(module, value)


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _REPLACED:
            return _REPLACED[(module, name)]
        if refused_global(module, name):
            raise UnsafeFileError(f'{module}.{name}')
        return super().find_class(module, name)

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeFileError(f'a persistent id {pid!r}')


_NULL = _SafeUnpickler(io.BytesIO(b''))


def unsafe(error: UnsafeFileError, path: str, what: str, opt_in: str) -> UnsafeFileError:
    """The error to raise for a file the safe reader refused: the file, what it names, and how to open it."""
    named = error.args[0]
    if named.startswith('dill.'):
        named = f'code stored in the file itself ({named}: a function or class of its own, saved by value)'
    return UnsafeFileError(f"Expected {what} that loads without running code. Received: {path!r}, which names "
                           f"{named}: reading it would import and call that. The safe reader rebuilds "
                           "tensors, containers and the models of torch.nn and flowpipe only. If you trust where "
                           f"the file comes from, open it with {opt_in}, which runs whatever code it holds.")


def load(file: IO[bytes], trusted: bool = False) -> Any:
    """Unpickle ``file``: with the safe reader, or with dill where ``trusted`` (running whatever the file holds).

    Raises ``UnsafeFileError`` (its ``args[0]``: the refused global) where the file needs more than the safe
    reader calls; the caller adds the file's name and the way to open it.
    """
    if trusted:
        return dill.load(file)
    return _SafeUnpickler(file).load()
