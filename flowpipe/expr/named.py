"""Named expressions: ``B`` (batch), ``C`` (config), ``V`` (variable), ``D`` (dataset), ``M`` (model).

``B``, ``C`` and ``V`` are assignable: ``set(value, ctx, mode)`` writes with one of the modes ``'w'`` (write),
``'a'`` (append to a list), ``'e'`` (extend a list) or ``'u'`` (update a dict or set). A ``mode=`` given when
the expression is made (``V('loss', mode='a')``) is the default for assignments through it.
A name that does not exist raises ``ExpressionError`` (a ``KeyError``) naming what exists instead.
"""
from __future__ import annotations

import difflib
import threading
from collections.abc import Mapping
from typing import Any, Iterable

from ..config import Config
from ..errors import ExpressionError
from .base import MISSING, Expression

__all__ = ['BatchExpr', 'ConfigExpr', 'DatasetExpr', 'ModelExpr', 'NamedExpr', 'VariableExpr', 'check_mode']

_MODES = {'w': 'w', 'write': 'w', 'a': 'a', 'append': 'a', 'e': 'e', 'extend': 'e', 'u': 'u', 'update': 'u'}
_MODE_METHODS = {'a': ('append', 'a list'), 'e': ('extend', 'a list'), 'u': ('update', 'a dict or a set')}
# Config writes are rare (a few per run): one lock for all of them keeps Config free of locking code.
_CONFIG_LOCK = threading.RLock()


def check_mode(mode: str) -> str:
    """The one-letter form of an assignment mode; ``ValueError`` for an unknown one."""
    short = _MODES.get(mode) if isinstance(mode, str) else None
    if short is None:
        raise ValueError(f"Expected an assignment mode 'w' (write), 'a' (append), 'e' (extend) or 'u' (update). "
                         f"Received: mode={mode!r}.")
    return short


def combine(current: Any, value: Any, mode: str, target: Any) -> Any:
    """``target``'s new value after writing ``value`` into ``current`` with ``mode`` (containers change in place)."""
    if mode == 'w':
        return value
    if current is MISSING or current is None:
        if mode == 'a':
            return [value]
        if mode == 'e':
            return list(value)
        if isinstance(value, (set, frozenset)):
            return set(value)
        # an object that gathers with update() (metrics) starts as itself
        return dict(value) if isinstance(value, Mapping) or not callable(getattr(value, 'update', None)) else value
    name, expected = _MODE_METHODS[mode]
    method = getattr(current, name, None)
    if method is None:
        raise TypeError(f"Expected {target!r} to hold {expected} to {name} with mode={mode!r}. Received: "
                        f"{type(current).__name__} {current!r}. Initialise it with a container or use mode='w'.")
    method(value)
    return current


def missing_error(expr: Any, what: str, name: Any, available: Iterable, hint: str = '') -> ExpressionError:
    """An ``ExpressionError`` for ``expr`` naming the missing ``what`` and what exists instead."""
    names = sorted({str(item) for item in available})
    close = difflib.get_close_matches(str(name), names, n=3, cutoff=0.6)
    message = f"{expr!r}: no {what} named {name!r}. Available: {names}."
    if close:
        message += f" Did you mean {' or '.join(repr(item) for item in close)}?"
    if hint:
        message += f" {hint}"
    return ExpressionError(message)


def _public_names(obj: Any) -> list[str]:
    """Components, instance attributes and properties of ``obj``, read without running any property."""
    names = set(getattr(obj, 'components', None) or ())
    names.update(getattr(obj, '__dict__', {}))
    for klass in type(obj).__mro__:
        names.update(name for name, member in vars(klass).items() if isinstance(member, property))
    return sorted(str(name) for name in names if not str(name).startswith('_'))


class NamedExpr(Expression):
    """A reference to a named value in the context: ``name``, optional ``default`` and assignment ``mode``."""
    __slots__ = ('_name', '_default', '_mode')
    _letter = '?'

    def __init__(self, name: Any = None, *, default: Any = MISSING, mode: str = 'w'):
        self._name, self._default, self._mode = name, default, check_mode(mode)

    @property
    def expr_name(self) -> Any:
        """The referenced name (``None`` for the whole batch, config or dataset)."""
        return self._name

    def _missing(self, what: str, available: Iterable, hint: str = '') -> Any:
        if self._default is not MISSING:
            return self._default
        raise missing_error(self, what, self._name, available, hint)

    def __repr__(self) -> str:
        parts = [] if self._name is None else [repr(self._name)]
        if self._default is not MISSING:
            parts.append(f'default={self._default!r}')
        if self._mode != 'w':
            parts.append(f'mode={self._mode!r}')
        return f"{self._letter}({', '.join(parts)})"


def _require_str(letter: str, name: Any, what: str) -> None:
    if name is not None and not (isinstance(name, str) and name):
        raise TypeError(f"Expected {letter}(name) with a non-empty string naming {what}. Received: name={name!r}.")


class BatchExpr(NamedExpr):
    """``B('name')``: a component or attribute of the batch; ``B()``: the batch itself."""
    __slots__ = ()
    _letter = 'B'

    def __init__(self, name: str | None = None, *, default: Any = MISSING, mode: str = 'w'):
        _require_str('B', name, 'a batch component or attribute')
        super().__init__(name, default=default, mode=mode)

    def get(self, ctx: Any) -> Any:
        batch = ctx.batch
        if self._name is None:
            return batch
        if batch is None:
            if self._default is not MISSING:
                return self._default
            raise ExpressionError(f"{self!r}: there is no batch here (before/after sections and init actions "
                                  "run without one). Use V, C or D there, or give B(name, default=...).")
        try:
            return getattr(batch, self._name)
        except AttributeError:
            return self._missing('batch component or attribute', _public_names(batch),
                                 f"The batch is a {type(batch).__name__}.")

    def set(self, value: Any, ctx: Any, mode: str | None = None) -> None:
        if self._name is None:
            raise TypeError(f"Expected B('name') as a target. Received: {self!r}, the batch itself, which cannot be "
                            "replaced by assignment. Return a new batch from an action instead.")
        mode = self._mode if mode is None else check_mode(mode)
        batch = ctx.batch
        current = MISSING if mode == 'w' else getattr(batch, self._name, MISSING)
        new = combine(current, value, mode, self)
        if new is not current:
            setattr(batch, self._name, new)


class VariableExpr(NamedExpr):
    """``V('name')``: a pipeline variable (``default=`` when it may be missing)."""
    __slots__ = ()
    _letter = 'V'

    def __init__(self, name: Any, *, default: Any = MISSING, mode: str = 'w'):
        if name is None:
            raise TypeError("Expected V(name) with the name of a pipeline variable. Received: no name.")
        super().__init__(name, default=default, mode=mode)

    def get(self, ctx: Any) -> Any:
        value = ctx.variables.get(self._name, MISSING)
        if value is MISSING:
            return self._missing('variable', ctx.variables,
                                 "Create it with init_variable(name, value) or give V(name, default=...).")
        return value

    def set(self, value: Any, ctx: Any, mode: str | None = None) -> None:
        mode = self._mode if mode is None else check_mode(mode)
        variables = ctx.variables
        with variables.lock:
            current = variables.get(self._name, MISSING)
            new = combine(current, value, mode, self)
            if new is not current:
                variables[self._name] = new


class ConfigExpr(NamedExpr):
    """``C('key')``: a pipeline config option (``'a/b'`` paths allowed); ``C()``: the whole config."""
    __slots__ = ()
    _letter = 'C'

    def get(self, ctx: Any) -> Any:
        config = ctx.config
        if self._name is None:
            return config
        if isinstance(config, Config):
            value = config.get(self._name, MISSING)
        else:
            value = Config(config).get(self._name, MISSING)
        if value is MISSING:
            keys = Config(config).flatten() if config else {}
            return self._missing('config key', keys,
                                 "Pass it with pipeline << {key: value} or give C(key, default=...).")
        return value

    def set(self, value: Any, ctx: Any, mode: str | None = None) -> None:
        if self._name is None:
            raise TypeError(f"Expected C('key') as a target. Received: {self!r}, the whole config. Name a key.")
        mode = self._mode if mode is None else check_mode(mode)
        with _CONFIG_LOCK:
            if ctx.config is None:
                ctx.config = Config()
            elif not isinstance(ctx.config, Config):
                ctx.config = Config(ctx.config)
            current = ctx.config.get(self._name, MISSING)
            new = combine(current, value, mode, self)
            if new is not current:
                ctx.config[self._name] = new


class DatasetExpr(NamedExpr):
    """``D('name')``: an attribute of the dataset the pipeline is bound to; ``D()``: the dataset."""
    __slots__ = ()
    _letter = 'D'

    def __init__(self, name: str | None = None, *, default: Any = MISSING):
        _require_str('D', name, 'a dataset attribute')
        super().__init__(name, default=default)

    def get(self, ctx: Any) -> Any:
        dataset = ctx.dataset
        if dataset is None:
            if self._default is not MISSING:
                return self._default
            raise ExpressionError(f"{self!r}: the pipeline is not bound to a dataset. "
                                  "Bind one with pipeline << dataset or dataset.pipeline().")
        if self._name is None:
            return dataset
        try:
            return getattr(dataset, self._name)
        except AttributeError:
            return self._missing('dataset attribute', _public_names(dataset),
                                 f"The dataset is a {type(dataset).__name__}; "
                                 "pass attributes as Dataset(..., name=value).")


class ModelExpr(NamedExpr):
    """``M('name')``: a model of the pipeline."""
    __slots__ = ()
    _letter = 'M'

    def __init__(self, name: str):
        _require_str('M', name, 'a model')
        if name is None:
            raise TypeError("Expected M(name) with the name of a model. Received: no name.")
        super().__init__(name)

    def get(self, ctx: Any) -> Any:
        model = ctx.models.get(self._name, MISSING)
        if model is MISSING:
            return self._missing('model', ctx.models, "Create it with init_model(...) before using it.")
        return model
