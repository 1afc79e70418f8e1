"""The canonical text of a value: the same in every process for the same value, whole (never cut), readable.

It is what the pipeline's canonical description (``canonical.py``) is made of. The rules:

- ``None``, booleans, numbers and strings: their ``repr`` (a float's is exact); lists, tuples, sets (sorted) and
  dicts (sorted by key) item by item, so ``(8,)`` reads ``(8,)``.
- numpy arrays and torch tensors: small ones (up to 32 items) with their values, larger ones by dtype, shape and a
  checksum of their bytes; a larger memory-mapped array (a token file) by its file's size and a digest of sampled
  chunks, without reading it whole (``flowpipe.data.token_files.mapped_text``).
- an ``nn.Module`` by its class and structure (its ``repr``), not its weights: a network object in a config is
  compared as an architecture, so a run that trained it in place still matches its checkpoint.
- a named expression by its ``repr`` (``B('x')``, ``C('lr') * 2``); when it holds something its ``repr`` does not
  spell out in full (a function, an array, an object), followed by a checksum of its whole structure.
- a function or class by its module and qualified name; a lambda or a function defined inside another one by
  that name plus a checksum of its code (bytecode, constants, names), as its name does not tell two of them apart.
  The values a function closes over are not part of it.
- any other object with a ``repr`` of its own: that ``repr`` without memory addresses; one with the default
  ``repr``: its class and its attributes, two levels deep.
"""
from __future__ import annotations

import functools
import hashlib
import re
import sys
import types
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..data.token_files import mapped_text
from ..expr.base import MISSING, Expression

__all__ = ['callable_text', 'expression_text', 'stable_repr', 'text']

_ADDRESS = re.compile(r' at 0x[0-9a-fA-F]+')
_PLAIN = (type(None), bool, int, float, complex, str, bytes, slice, type(Ellipsis))
_SMALL = 32
_DEPTH = 6


def stable_repr(value: Any) -> str:
    """``repr`` without memory addresses (functions, objects), so it is the same in every process."""
    return _ADDRESS.sub('', repr(value))


def text(value: Any, depth: int = 0) -> str:
    """The canonical text of ``value`` (see the module docstring)."""
    if isinstance(value, _PLAIN) or value is MISSING:
        return repr(value)
    if depth > _DEPTH:
        return f'<{_qualified(type(value))}, nested too deep>'
    if isinstance(value, Expression):
        return expression_text(value)
    if isinstance(value, Mapping):
        items = sorted((text(key, depth + 1), text(item, depth + 1)) for key, item in value.items())
        return '{' + ', '.join(f'{key}: {item}' for key, item in items) + '}'
    if isinstance(value, (list, tuple)):
        items = [text(item, depth + 1) for item in value]
        if isinstance(value, list):
            return '[' + ', '.join(items) + ']'
        inner = ', '.join(items) + (',' if len(items) == 1 else '')
        return (_qualified(type(value)) if hasattr(type(value), '_fields') else '') + f'({inner})'
    if isinstance(value, (set, frozenset)):
        return '{' + ', '.join(sorted(text(item, depth + 1) for item in value)) + '}' if value else 'set()'
    if isinstance(value, (np.ndarray, np.generic)):
        return _array_text(value)
    special = _torch_text(value)
    if special is not None:
        return special
    if callable(value) and (isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType,
                                               types.MethodType, functools.partial))):
        return callable_text(value)
    return _object_text(value, depth)


def _array_text(value: Any) -> str:
    array = np.asarray(value)
    if array.dtype.kind == 'O':
        return f'array({text(array.tolist())}, dtype=object)'
    if array.size <= _SMALL:
        return f'array({text(array.tolist())}, dtype={array.dtype})'
    mapped = mapped_text(value) if isinstance(value, np.memmap) else None
    if mapped is not None:
        return mapped
    return f'array(dtype={array.dtype}, shape={array.shape}, crc32={zlib.crc32(np.ascontiguousarray(array).data)})'


def _torch_text(value: Any) -> str | None:
    """A tensor's or a module's text; ``None`` for anything else (torch is not imported here)."""
    torch = sys.modules.get('torch')
    if torch is None:
        return None
    if isinstance(value, torch.Tensor):
        full = getattr(value, 'full_tensor', None)            # a DTensor shard: the whole tensor
        tensor = (full() if full is not None else value).detach().cpu()
        if tensor.dtype in (torch.bfloat16, torch.float16):
            tensor = tensor.float()
        return 'tensor' + _array_text(tensor.numpy())[len('array'):]
    if isinstance(value, torch.nn.Module):
        structure = ' '.join(line.strip() for line in stable_repr(value).splitlines())
        return f'{_qualified(type(value))}: {structure}'
    return None


def _object_text(value: Any, depth: int) -> str:
    """An object with its own ``repr``: that ``repr``; with the default one: its class and attributes."""
    if type(value).__repr__ is not object.__repr__:
        return stable_repr(value)
    attributes = getattr(value, '__dict__', None)
    if callable(value) and not attributes:
        return callable_text(value)
    if not attributes or depth >= 2:
        return f'<{_qualified(type(value))}>'
    items = ', '.join(f'{name}={text(item, depth + 1)}' for name, item in sorted(attributes.items())
                      if not name.startswith('__'))
    return f'{_qualified(type(value))}({items})'


def callable_text(value: Any) -> str:
    """A function, class, method or ``functools.partial`` by qualified name (see the module docstring)."""
    if isinstance(value, functools.partial):
        parts = [callable_text(value.func)] + [text(arg) for arg in value.args]
        parts += [f'{key}={text(item)}' for key, item in sorted(value.keywords.items())]
        return f"partial({', '.join(parts)})"
    if isinstance(value, types.MethodType):
        return f'{callable_text(value.__func__)} of {_qualified(type(value.__self__))}'
    name = _qualified(value)
    code = getattr(value, '__code__', None)
    if code is not None and '<' in name:          # a lambda, or a function defined inside another one
        return f'{name} (code {_code_digest(code)})'
    return name


def _qualified(value: Any) -> str:
    module = getattr(value, '__module__', None) or ''
    name = getattr(value, '__qualname__', None) or getattr(value, '__name__', None) or type(value).__qualname__
    return f'{module}.{name}' if module and module != 'builtins' else name


def _code_digest(code: types.CodeType) -> str:
    """A checksum of what a code object does: its bytecode, constants (nested code too) and names."""
    def parts(code: types.CodeType) -> list:
        consts = [parts(item) if isinstance(item, types.CodeType) else repr(item) for item in code.co_consts]
        return [code.co_code.hex(), consts, list(code.co_names), code.co_argcount]
    return hashlib.sha256(repr(parts(code)).encode()).hexdigest()[:12]


def expression_text(expr: Expression) -> str:
    """A named expression's ``repr``, with a checksum of its structure when the ``repr`` may leave some out."""
    shown = stable_repr(expr)
    structure, whole = _structure(expr)
    if whole:
        return shown
    return f"{shown} [structure {hashlib.sha256(repr(structure).encode()).hexdigest()[:12]}]"


def _structure(value: Any) -> tuple[Any, bool]:
    """``(a nested description of value, whether its repr spells all of it out)``."""
    if isinstance(value, Expression):
        parts, whole = [type(value).__qualname__], True
        for klass in type(value).__mro__:
            for slot in getattr(klass, '__slots__', ()):
                part, complete = _structure(getattr(value, slot, None))
                parts.append((slot, part))
                whole = whole and complete
        return parts, whole
    if isinstance(value, (list, tuple)):
        items = [_structure(item) for item in value]
        return [item for item, _ in items], all(complete for _, complete in items)
    if isinstance(value, Mapping):
        items = [(_structure(key), _structure(item)) for key, item in value.items()]
        return ([(key[0], item[0]) for key, item in items],
                all(key[1] and item[1] for key, item in items))
    if isinstance(value, (type, types.BuiltinFunctionType)):  # BinaryExpr's operators, a root's class: named whole
        return callable_text(value), True
    return text(value), isinstance(value, _PLAIN) or value is MISSING
