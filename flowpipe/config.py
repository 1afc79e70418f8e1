"""``Config``: a nested mapping addressed with ``'/'`` keys.

``Config({'a/b': 1})`` stores ``{'a': {'b': 1}}``; ``cfg['a/b']``, ``cfg['a']['b']``, ``'a/b' in cfg`` and
``cfg.get('a/b')`` all walk the path. Nested mappings are stored as ``Config`` objects too, so a sub-config
(``cfg['a']``) understands paths as well. ``Config`` is a ``dict``: ``**cfg``, ``dict(cfg)`` and
``isinstance(cfg, dict)`` work as usual. Keys that are not strings (a named expression, a number) are plain,
single-level keys.

Merging (``update``, ``put``, ``+``): a mapping merged into a mapping merges recursively; anything else replaces
the old value (the right side wins). A path that runs through a value which is not a mapping is an error.

batchflow's forms work too: ``Config([('a/b', 1), ('c', 2)])`` (a list of key-value pairs), ``cfg.a.b`` (read a
key as an attribute), ``cfg.keys(flatten=True)`` / ``values`` / ``items`` (one entry per leaf) and ``cfg.config``
(the mapping itself: a ``Config`` is its own inner dict).
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from . import safe_pickle

__all__ = ['Config']

_MISSING = object()


def _split(key: Any) -> tuple:
    """The path of ``key``: its parts for a string, a one-part path for any other key."""
    if not isinstance(key, str):
        return (key,)
    if '/' not in key:
        if not key:
            raise ValueError("Expected a non-empty config key. Received: key=''. Use a name such as 'device'.")
        return (key,)
    parts = tuple(key.split('/'))
    if '' in parts:
        raise ValueError(f"Expected config key parts separated by single '/'. Received: key={key!r}. "
                         "Remove the empty part (a leading, trailing or doubled '/').")
    return parts


def _pairs(items: list) -> Config:
    """A dict from batchflow's list form of a config, ``[(key, value), ...]``, merged in order."""
    for item in items:
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"Expected a list of (key, value) pairs to build a Config. Received the item {item!r}; "
                             "give every item exactly a key and a value")
    config = Config()
    for key, value in items:
        config.put(key, value)
    return config


def _join(parts: tuple) -> str:
    return '/'.join(str(part) for part in parts)


class Config(dict):
    """A nested mapping whose string keys may be paths such as ``'inputs/images/shape'``.

    Args:
        config: a mapping (``dict`` or ``Config``), a list of ``(key, value)`` pairs, or ``None`` for an empty
            config.
        **kwargs: more items, merged after ``config``.
    """

    def __init__(self, config: Mapping | list | None = None, **kwargs: Any):
        super().__init__()
        if isinstance(config, list):
            config = _pairs(config)
        if config is not None:
            self.update(config)
        if kwargs:
            self.update(kwargs)

    @property
    def config(self) -> Config:
        """The config itself (batchflow keeps its items in an inner ``config`` dict; a ``Config`` is that dict)."""
        return self

    def __getattr__(self, name: str) -> Any:
        # cfg.a reads the key 'a' (batchflow's dotted access); private and special names stay attributes
        if not name.startswith('_') and dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute or key {name!r}")

    # lookups

    def _walk(self, parts: tuple) -> Any:
        """The value at ``parts``, or ``_MISSING`` when the path does not exist."""
        node = self
        for part in parts:
            if not isinstance(node, dict):
                return _MISSING
            node = dict.get(node, part, _MISSING)
            if node is _MISSING:
                return _MISSING
        return node

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, str) or '/' not in key:
            value = dict.get(self, key, _MISSING)
            if value is _MISSING:
                raise KeyError(self._missing_message(key, (key,)))
            return value
        parts = _split(key)
        value = self._walk(parts)
        if value is _MISSING:
            raise KeyError(self._missing_message(key, parts))
        return value

    def _missing_message(self, key: Any, parts: tuple) -> str:
        node, depth = self, 0
        while depth < len(parts) - 1 and isinstance(dict.get(node, parts[depth]), dict):
            node, depth = dict.get(node, parts[depth]), depth + 1
        where = f"at {_join(parts[:depth])!r}" if depth else 'at the top level'
        if isinstance(node, dict) and parts[depth] in node:
            value = node[parts[depth]]
            return (f"Config has no key {key!r}: {_join(parts[:depth + 1])!r} holds {value!r}, not a mapping. "
                    f"Use the key {_join(parts[:depth + 1])!r} instead.")
        return f"Config has no key {key!r}. Keys {where}: {list(node)!r}. Check the spelling or add the key."

    def get(self, key: Any, default: Any = None) -> Any:
        """The value at ``key`` (a path), or ``default`` when it is missing."""
        if not isinstance(key, str) or '/' not in key:
            return dict.get(self, key, default)
        value = self._walk(_split(key))
        return default if value is _MISSING else value

    def __contains__(self, key: Any) -> bool:
        if not isinstance(key, str) or '/' not in key:
            return dict.__contains__(self, key)
        return self._walk(_split(key)) is not _MISSING

    # changes

    def put(self, key: Any, value: Any) -> None:
        """Put ``value`` at ``key``; a mapping merges into a mapping already there, anything else replaces it."""
        parts = _split(key)
        node = self
        for depth, part in enumerate(parts[:-1]):
            child = dict.get(node, part, _MISSING)
            if child is _MISSING:
                child = Config()
                dict.__setitem__(node, part, child)
            elif not isinstance(child, Config):
                if not isinstance(child, Mapping):
                    raise ValueError(f"Expected config key {key!r} to go through mappings. Received: "
                                     f"{_join(parts[:depth + 1])!r} holds {child!r}, not a mapping. "
                                     f"Put a dict at {_join(parts[:depth + 1])!r} first, or use another key.")
                child = Config(child)
                dict.__setitem__(node, part, child)
            node = child
        node._put_leaf(parts[-1], value)

    def _put_leaf(self, part: Any, value: Any) -> None:
        if isinstance(value, Mapping):
            current = dict.get(self, part, _MISSING)
            if isinstance(current, Config):
                current.update(value)
                return
            value = Config(value)
        dict.__setitem__(self, part, value)

    def __setitem__(self, key: Any, value: Any) -> None:
        """Set ``key`` (a path) to ``value``, replacing what was there (a mapping is not merged)."""
        parts = _split(key)
        if len(parts) > 1:
            self.put(_join(parts[:-1]), {})
        node = self._walk(parts[:-1])
        dict.__setitem__(node, parts[-1], Config(value) if isinstance(value, Mapping) else value)

    def update(self, other: Mapping | None = None, **kwargs: Any) -> None:
        """Merge ``other`` and ``kwargs`` in recursively: nested mappings merge, other values replace."""
        if other is not None:
            if not isinstance(other, Mapping):
                raise TypeError(f"Expected a mapping (dict or Config) to build or update a Config. "
                                f"Received: {type(other).__name__} {other!r}. Pass a dict such as {{'a/b': 1}}.")
            for key, value in other.items():
                self.put(key, value)
        for key, value in kwargs.items():
            self.put(key, value)

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        """Remove ``key`` (a path) and return its value; ``default`` if given and the key is missing."""
        parts = _split(key)
        parent = self._walk(parts[:-1])
        if isinstance(parent, dict) and parts[-1] in parent:
            return dict.pop(parent, parts[-1])
        if default is _MISSING:
            raise KeyError(self._missing_message(key, parts))
        return default

    def __delitem__(self, key: Any) -> None:
        self.pop(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        """The value at ``key``; put ``default`` there first if it is missing."""
        if key not in self:
            self.put(key, default)
        return self[key]

    # views and copies

    def keys(self, flatten: bool = False) -> Any:
        """The top-level keys, or with ``flatten=True`` one ``'a/b/c'`` key per leaf."""
        return self.flatten().keys() if flatten else dict.keys(self)

    def values(self, flatten: bool = False) -> Any:
        """The top-level values, or with ``flatten=True`` the leaf values."""
        return self.flatten().values() if flatten else dict.values(self)

    def items(self, flatten: bool = False) -> Any:
        """The top-level items, or with ``flatten=True`` one ``('a/b/c', value)`` item per leaf."""
        return self.flatten().items() if flatten else dict.items(self)

    def flatten(self) -> dict:
        """A plain dict with one ``'a/b/c'`` key per leaf value; a sub-config with non-string keys stays whole."""
        flat = {}
        for key, value in dict.items(self):
            if isinstance(value, Config) and value and all(isinstance(k, str) for k in dict.keys(value)):
                prefix = key if isinstance(key, str) else None
                for sub_key, sub_value in value.flatten().items():
                    flat[f"{prefix}/{sub_key}" if prefix is not None else sub_key] = sub_value
                if prefix is None:
                    flat[key] = value
            else:
                flat[key] = value
        return flat

    def copy(self) -> Config:
        """A copy whose nested configs are copies too; leaf values are shared."""
        new = Config()
        for key, value in dict.items(self):
            dict.__setitem__(new, key, value.copy() if isinstance(value, Config) else value)
        return new

    __copy__ = copy

    def __add__(self, other: Mapping) -> Config:
        if not isinstance(other, Mapping):
            return NotImplemented
        new = self.copy()
        new.update(other)
        return new

    def __radd__(self, other: Mapping) -> Config:
        if not isinstance(other, Mapping):
            return NotImplemented
        return Config(other) + self

    __or__ = __add__
    __ror__ = __radd__

    def __ior__(self, other: Mapping) -> Config:
        self.update(other)
        return self

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, Mapping) and not isinstance(other, Config):
            try:
                other = Config(other)
            except (TypeError, ValueError):
                return False
        return dict.__eq__(self, other)

    def __ne__(self, other: Any) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None

    def __iter__(self) -> Iterator:
        return dict.__iter__(self)

    def __repr__(self) -> str:
        return f"Config({self.to_dict()!r})"

    def to_dict(self) -> dict:
        """A nested plain ``dict`` with the same content."""
        return {key: value.to_dict() if isinstance(value, Config) else value for key, value in dict.items(self)}

    def __reduce__(self):
        return (Config, (self.to_dict(),))


safe_pickle.allow(Config)
