"""flowpipe's files (model files, export metadata, run checkpoints, Research's records): written by ``torch.save``,
read by torch's own restricted unpickler, so that a file from someone else runs no code.

Writing (``dump``, ``dumps``): ``torch.save``'s zip, its tensors stored as tensors, its objects pickled by the
standard pickler (protocol 2, the one torch's restricted reader reads). Contents the standard pickler cannot
write by reference — a lambda, a class or function of ``__main__`` or of a notebook — are written with dill
instead, which stores that code in the file: such a file can only be read trusted.

Reading (``load``) is safe unless ``trusted``:

1. the file's pickle is disassembled (``pickletools``: opcodes are read, nothing is called or imported) and every
   global it names is looked up in one table of exact names (``allowed_names``); a name not in it is refused with
   ``UnsafeFileError`` naming it, before anything of the file is unpickled;
2. the file is then unpickled by ``torch.load(weights_only=True)``, torch's restricted unpickler, with exactly the
   names this file uses added to torch's own safe globals (``torch.serialization.safe_globals``): it builds
   tensors and containers and calls only what the table holds.

The table holds exact ``module.name`` entries, never a prefix: torch's tensor, storage and dtype names; numpy's
array and scalar rebuilders (under numpy 1's and numpy 2's module names); ``collections`` and builtin value
types; the module classes of ``torch.nn.modules`` (each class those modules define), the Python functions of
``torch.nn.functional`` and ``torch.nn.init``, and torch's optimizer and scheduler classes (a config names them);
and the classes flowpipe's packages register with ``allow`` (their networks and layers, model callbacks, ``Config``,
``PerItem``, a research's ``Alias``): each package registers what it owns when it is imported.

``trusted=True`` reads the file with dill (``torch.load(weights_only=False, pickle_module=dill)``), which runs
whatever code it holds. A file in the bare-pickle format flowpipe wrote before its files were ``torch.save`` zips
is read trusted only: the safe reader refuses it, saying so (open it trusted once and save it again to convert).
"""
from __future__ import annotations

import _compat_pickle
import importlib
import io
import pickle
import pickletools
import threading
import types
import zipfile
from collections.abc import Iterable, Mapping
from typing import IO, Any

from .errors import UnsafeFileError

__all__ = ['BARE_PICKLE', 'UnsafeFileError', 'allow', 'allowed_names', 'defined_in', 'dump', 'dumps', 'load',
           'load_with_table', 'names_in', 'unsafe', 'value_names']

#: the globals flowpipe's packages registered (``allow``): exact ``'module.name'`` -> the object
_REGISTERED: dict[str, Any] = {}
_TABLE: dict[str, Any] | None = None          # the whole table, made at the first read (it imports torch)
_LOCK = threading.Lock()                       # torch's safe globals are one process-wide set

#: the prefix of every refusal's ``args[0]`` for a file in the format written before the ``torch.save`` zips
BARE_PICKLE = 'the bare pickle format of earlier flowpipe files'
_ZIP_MAGIC = b'PK\x03\x04'
_GLOBAL_OPCODES = {'GLOBAL', 'INST'}
_OTHER_LOOKUPS = {'EXT1', 'EXT2', 'EXT4'}       # lookups a disassembly cannot name: refused
_STRINGS = {'SHORT_BINUNICODE', 'BINUNICODE', 'BINUNICODE8', 'UNICODE'}


def _name(value: Any) -> str:
    return f'{value.__module__}.{value.__qualname__}'


def allow(*values: Any) -> None:
    """Let the safe reader rebuild ``values`` (classes or functions), each under its own ``module.qualname``.

    A package registers the classes it owns whose instances (or references) its files hold. A value must be
    safe to call with any arguments a file gives and to fill from any state (``__setstate__``): it may build an
    object, never touch files, processes or other modules.
    """
    for value in values:
        if not isinstance(value, (type, types.FunctionType)) or '<' in value.__qualname__:
            raise TypeError(f"Expected classes or module-level functions to allow. Received: {value!r}.")
        _REGISTERED[_name(value)] = value
    global _TABLE
    _TABLE = None


def defined_in(modules: Iterable[types.ModuleType], base: type | None = None,
               functions: bool = False) -> dict[str, Any]:
    """``{'module.name': value}`` of the classes (subclasses of ``base``) or the public Python functions that
    each of ``modules`` defines itself (not those it imports)."""
    found = {}
    for module in modules:
        for value in vars(module).values():
            if getattr(value, '__module__', None) != module.__name__:
                continue
            if functions and isinstance(value, types.FunctionType) and not value.__name__.startswith('_') or (
                    not functions and isinstance(value, type) and (base is None or issubclass(value, base))):
                found[_name(value)] = value
    return found


def _torch_values() -> dict[str, Any]:
    """torch's sizes, devices, dtypes, layouts and memory formats."""
    import torch
    table: dict[str, Any] = {'torch.Size': torch.Size, 'torch.device': torch.device,
                             'torch.serialization._get_layout': torch.serialization._get_layout}
    table.update({str(value): value for value in vars(torch).values()
                  if isinstance(value, (torch.dtype, torch.layout, torch.memory_format))})
    return table


def _torch_names() -> dict[str, Any]:
    """torch's names a flowpipe file holds: tensors and what rebuilds them, dtypes, modules, functions, optimizers."""
    import torch
    import torch.nn.modules
    import torch.optim.lr_scheduler
    from torch import _utils
    table: dict[str, Any] = {
        **_torch_values(), 'torch.Tensor': torch.Tensor, 'torch.nn.parameter.Parameter': torch.nn.Parameter,
        'torch._tensor._rebuild_from_type_v2': torch._tensor._rebuild_from_type_v2}
    for name in ('_rebuild_tensor', '_rebuild_tensor_v2', '_rebuild_tensor_v3', '_rebuild_parameter',
                 '_rebuild_parameter_with_state', '_rebuild_qtensor', '_rebuild_sparse_tensor',
                 '_rebuild_meta_tensor_no_storage', '_rebuild_nested_tensor', '_rebuild_wrapper_subclass',
                 '_rebuild_device_tensor_from_cpu_tensor'):
        if hasattr(_utils, name):
            table[f'torch._utils.{name}'] = getattr(_utils, name)
    table.update({f'torch.{value.__name__}': value for value in vars(torch).values()
                  if isinstance(value, type) and value.__name__.endswith('Storage')})
    table.update({'torch.storage.UntypedStorage': torch.UntypedStorage, 'torch.storage.TypedStorage': torch.TypedStorage})
    modules = [module for module in vars(torch.nn.modules).values() if isinstance(module, types.ModuleType)]
    table.update(defined_in(modules, torch.nn.Module))
    table.update(defined_in([torch.nn.functional, torch.nn.init], functions=True))
    table.update({_name(value): value for value in vars(torch.optim).values()
                  if isinstance(value, type) and issubclass(value, torch.optim.Optimizer)})
    table.update(defined_in([torch.optim.lr_scheduler], torch.optim.lr_scheduler.LRScheduler))
    return table


def _numpy_names() -> dict[str, Any]:
    """numpy's array and scalar rebuilders, under the module names of numpy 1 and numpy 2 alike."""
    import numpy
    multiarray = importlib.import_module('numpy._core.multiarray' if hasattr(numpy, '_core') else
                                         'numpy.core.multiarray')
    table = {'numpy.ndarray': numpy.ndarray, 'numpy.dtype': numpy.dtype}
    for module in ('numpy.core.multiarray', 'numpy._core.multiarray'):
        table[f'{module}._reconstruct'] = multiarray._reconstruct
        table[f'{module}.scalar'] = multiarray.scalar
    return table


def _built_by() -> dict[str, list[tuple[Any, str]]]:
    """Classes a file never names that an allowed call returns and the reader then fills (``BUILD``): the
    dtype classes ``numpy.dtype(...)`` makes, listed under the name that makes them."""
    import numpy
    dtypes = getattr(numpy, 'dtypes', None)
    classes = [value for value in vars(dtypes).values() if isinstance(value, type) and
               issubclass(value, numpy.dtype)] if dtypes is not None else []
    return {'numpy.dtype': [(value, _name(value)) for value in classes]}


def _standard_names() -> dict[str, Any]:
    """The standard library's value types (``_codecs.encode`` writes bytes)."""
    import codecs
    import collections
    values = {'builtins': (set, frozenset, bytearray, complex, slice, range), 'collections':
              (collections.OrderedDict, collections.Counter, collections.deque)}
    table = {f'{module}.{value.__name__}': value for module, group in values.items() for value in group}
    table.update({'_codecs.encode': codecs.encode, 'builtins.Ellipsis': Ellipsis})
    return table


def allowed_names() -> Mapping[str, Any]:
    """The safe reader's table: every global a file read without ``trusted`` may name, by its exact name."""
    global _TABLE
    if _TABLE is None:
        _TABLE = {**_standard_names(), **_numpy_names(), **_torch_names(), **_REGISTERED}
    return types.MappingProxyType(_TABLE)


class _Dill(Exception):
    """The contents need dill: a value the standard pickler would write by a name another process cannot find."""


def _needs_value(value: Any) -> bool:
    """Whether a function or class is one only dill can store (by value): of ``__main__``, or defined locally."""
    return isinstance(value, (type, types.FunctionType)) and (
        getattr(value, '__module__', None) == '__main__' or '<' in getattr(value, '__qualname__', '<'))


class _StandardPickler(pickle.Pickler):
    def __init__(self, file: IO[bytes], protocol: int | None = None):
        super().__init__(file, protocol, fix_imports=False)       # Python 3's names: builtins.set

    def reducer_override(self, obj: Any) -> Any:
        if _needs_value(obj):
            raise _Dill
        return NotImplemented


_STANDARD = types.SimpleNamespace(__name__='pickle', Pickler=_StandardPickler)


def dump(value: Any, file: IO[bytes], pickle_module: Any = None) -> None:
    """Write ``value`` to ``file`` as ``torch.save`` does, pickled by the standard pickler where it can be, by dill
    otherwise (or by ``pickle_module``: ``pickle`` refuses what needs dill, ``dill`` is used for everything)."""
    import dill
    import torch
    if pickle_module is dill:
        torch.save(value, file, pickle_module=dill)
        return
    start = file.tell()
    try:
        torch.save(value, file, pickle_module=_STANDARD)
    except (_Dill, pickle.PicklingError, AttributeError, TypeError) as error:
        if pickle_module is pickle:
            if isinstance(error, _Dill):
                raise pickle.PicklingError("Expected contents the standard pickler stores by reference. Received: "
                                           "code of __main__ or a local function; save without pickle_module=pickle "
                                           "(dill then stores it, and the file is read trusted only).") from None
            raise
        file.seek(start)
        file.truncate()
        torch.save(value, file, pickle_module=dill)


def dumps(value: Any, pickle_module: Any = None) -> bytes:
    """``dump`` into bytes."""
    buffer = io.BytesIO()
    dump(value, buffer, pickle_module)
    return buffer.getvalue()


def _pickle_of(file: IO[bytes]) -> bytes:
    """The pickle of a ``torch.save`` zip (its ``<archive>/data.pkl``); ``UnsafeFileError`` for a bare pickle."""
    start = file.tell()
    head = file.read(4)
    file.seek(start)
    if head != _ZIP_MAGIC:
        if head[:1] == pickle.PROTO:
            try:
                named = _refused(names_in(file.read()))
            except pickle.UnpicklingError:
                named = []
            raise UnsafeFileError(BARE_PICKLE, named)
        raise pickle.UnpicklingError(f"not a torch.save zip nor a pickle (it starts with {head!r})")
    with zipfile.ZipFile(file) as archive:
        names = [name for name in archive.namelist() if name.count('/') == 1 and name.endswith('/data.pkl')]
        if len(names) != 1:
            raise pickle.UnpicklingError(f"a zip without one <archive>/data.pkl (it holds {archive.namelist()[:5]})")
        data = archive.read(names[0])
    file.seek(start)
    return data


def names_in(data: bytes) -> list[str]:
    """The globals a pickle names, in order, read from its opcodes without unpickling anything.

    ``GLOBAL`` and ``INST`` carry their names. A ``STACK_GLOBAL`` (protocol 4 and later) takes its two names from
    the stack: they are followed through the opcodes that push strings and the memo that keeps them; where the two
    values before it are not strings pushed so (or for an extension code), it is given as ``'<opcode>'``, which
    no table holds: a reader refuses what a disassembly cannot name. A damaged stream raises
    ``pickle.UnpicklingError``.
    """
    names: list[str] = []
    memo: dict[int, str | None] = {}
    recent: list[str | None] = [None, None]         # the two values pushed last, where they are literal strings
    try:
        for opcode, argument, _ in pickletools.genops(data):
            kind = opcode.name
            if kind in _GLOBAL_OPCODES:
                names.append(_python3_name(*argument.split(' ', 1)))
            elif kind == 'STACK_GLOBAL':
                module, name = recent
                names.append(_python3_name(module, name) if module is not None and name is not None
                             else '<STACK_GLOBAL>')
            elif kind in _OTHER_LOOKUPS:
                names.append(f'<{kind}>')
            if kind in _STRINGS:
                recent = [recent[1], argument]
            elif kind == 'MEMOIZE':
                memo[len(memo)] = recent[1]
            elif kind in ('PUT', 'BINPUT', 'LONG_BINPUT'):
                memo[argument] = recent[1]
            elif kind in ('GET', 'BINGET', 'LONG_BINGET'):
                recent = [recent[1], memo.get(argument)]
            elif kind != 'FRAME':
                recent = [None, None]
    except ValueError as error:         # a truncated or damaged stream: corrupt, whatever it names
        raise pickle.UnpicklingError(f'a damaged pickle ({error})') from None
    return names


def _python3_name(module: str, name: str) -> str:
    """A protocol-2 global as Python 3 names it (``__builtin__.set`` is ``builtins.set``), as torch's reader maps it."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f'{module}.{name}'


def _refused(names: Iterable[str]) -> list[str]:
    table = allowed_names()
    return [name for name in dict.fromkeys(names) if name not in table]


def _load_safely(file: IO[bytes]) -> Any:
    import torch
    table = allowed_names()
    named = dict.fromkeys(names_in(_pickle_of(file)))
    refused = _refused(named)
    if refused:
        raise UnsafeFileError(refused[0], refused)
    with _LOCK:
        present = {entry if isinstance(entry, tuple) else (entry, _name(entry))
                   for entry in torch.serialization.get_safe_globals()}
        wanted = [(table[name], name) for name in named] + [
            entry for name in named for entry in _built_by().get(name, ())]
        added = [entry for entry in wanted if entry not in present]
        with torch.serialization.safe_globals(added):
            return torch.load(file, weights_only=True)


def load(file: IO[bytes], trusted: bool = False) -> Any:
    """Read a file of ``dump``: safely (see the module docstring), or with dill where ``trusted``.

    Raises ``UnsafeFileError`` (``args[0]``: the first refused name, or ``BARE_PICKLE``) where the file needs
    more than the safe reader rebuilds; the caller adds the file's name and the way to open it (``unsafe``).
    """
    if not trusted:
        return _load_safely(file)
    import dill
    import torch
    start = file.tell()
    head = file.read(4)
    file.seek(start)
    if head == _ZIP_MAGIC:
        return torch.load(file, weights_only=False, pickle_module=dill)
    return dill.load(file)


class _TableUnpickler(pickle._Unpickler):      # the Python unpickler: its steps can be overridden one by one
    """Unpickles with ``find_class`` limited to an exact table, no persistent ids, and ``BUILD`` (setting state)
    on instances only, never on a class or a function the file named."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file: IO[bytes], table: Mapping[str, Any]):
        super().__init__(file)
        self.table = table

    def find_class(self, module: str, name: str) -> Any:
        full = _python3_name(module, name)
        if full not in self.table:
            raise UnsafeFileError(full, [full])
        return self.table[full]

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafeFileError(f'a persistent id {pid!r}')

    def load_build(self) -> None:
        if isinstance(self.stack[-2], (type, types.FunctionType, types.BuiltinFunctionType)):
            raise UnsafeFileError(f'state set on {self.stack[-2]!r}')
        super().load_build()

    dispatch[pickle.BUILD[0]] = load_build


def load_with_table(data: bytes, table: Mapping[str, Any]) -> Any:
    """Unpickle ``data``, a pickle of any protocol that another library writes and would read with the full
    unpickler (``torch.distributed.checkpoint``'s metadata), naming only what ``table`` holds by its exact name:
    its names are checked before anything is unpickled (``names_in``), then the Python unpickler rebuilds it with
    ``find_class`` limited to the table and no state set on a class. ``UnsafeFileError`` as ``load`` raises it."""
    refused = [name for name in dict.fromkeys(names_in(data)) if name not in table]
    if refused:
        raise UnsafeFileError(refused[0], refused)
    return _TableUnpickler(io.BytesIO(data), table).load()


def value_names() -> dict[str, Any]:
    """The part of the table that names values, not code: the standard library's value types, torch's sizes,
    devices, dtypes, layouts and memory formats."""
    return {**_standard_names(), **_torch_values()}


def unsafe(error: UnsafeFileError, path: str, what: str, opt_in: str) -> UnsafeFileError:
    """The error to raise for a file the safe reader refused: the file, what it names, and how to open it."""
    named = error.args[0]
    trust = f"If you trust where the file comes from, open it with {opt_in}, which runs whatever code it holds"
    if named == BARE_PICKLE:
        names = [name.strip('<>') for name in error.args[1]] if len(error.args) > 1 else []
        held = f", which names {', '.join(names[:3])}{' and more' if len(names) > 3 else ''}" if names else ''
        return UnsafeFileError(f"Expected {what} that loads without running code. Received: {path!r}, in "
                               f"{BARE_PICKLE} (a pickle that can name any code){held}; only a trusted reader opens "
                               f"that format. {trust}; saving it again writes the current format, which the safe "
                               "reader reads.")
    if named.startswith('dill.'):
        named = f'code stored in the file itself ({named}: a function or class of its own, saved by value)'
    elif named.startswith('<'):
        named = f'a global the safe reader cannot name before reading ({named[1:-1]})'
    return UnsafeFileError(f"Expected {what} that loads without running code. Received: {path!r}, which names "
                           f"{named}: reading it would import and call that. The safe reader rebuilds tensors, "
                           "arrays, containers and the modules of torch.nn and flowpipe only. "
                           f"{trust}.")
