"""``pipeline.before`` / ``pipeline.after`` sections, and the chained-call method every action name becomes."""
from __future__ import annotations

import inspect
from typing import Any, Callable

from .names import batch_action_names, unknown_action
from .records import ActionRecord
from .registry import get_builtin

__all__ = ['SectionBuilder', 'action_form', 'adder', 'make_record']


class SectionBuilder:
    """``pipeline.before`` / ``pipeline.after``: its chained call adds a built-in to that section."""
    __slots__ = ('_pipeline', '_section')

    def __init__(self, pipeline: Any, section: str):
        self._pipeline = pipeline
        self._section = section

    @property
    def actions(self) -> tuple:
        """The records of this section."""
        return getattr(self._pipeline, '_' + self._section)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith('_'):
            raise AttributeError(f"'SectionBuilder' object has no attribute {name!r}")
        if get_builtin(name) is None or name in ('join', 'merge', 'rebatch'):
            batch_class = self._pipeline._batch_class()
            if get_builtin(name) is None and name not in batch_action_names(batch_class or object):
                error = unknown_action(name, batch_class)
                if 'Did you mean' in str(error):
                    raise error
            raise ValueError(f"Expected a built-in action in the {self._section!r} section (it runs without a "
                             f"batch). Received: {name!r}. Put batch actions in the main chain.")
        return adder(self._pipeline, name, self._section)

    def __repr__(self) -> str:
        return f"<{self._section} section: {list(self.actions)!r}>"


def adder(pipeline: Any, name: str, section: str) -> Callable[..., Any]:
    """The method ``pipeline.<name>``: records the call and returns the new pipeline. It shows the action's own
    parameters and docstring (``inspect.signature``, ``help()``, a notebook's Shift-Tab): ``action_form``."""
    def add(*args: Any, **kwargs: Any) -> Any:
        return pipeline._with_record(section, make_record(name, args, kwargs))
    add.__name__ = add.__qualname__ = name
    add.__signature__, add.__doc__, add.__module__ = action_form(name, pipeline._batch_class())
    return add


def _with_use_lock(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` with the keyword every action takes, ``use_lock`` (before a ``**kwargs``)."""
    parameters = [parameter for parameter in signature.parameters.values() if parameter.name != 'use_lock']
    lock = inspect.Parameter('use_lock', inspect.Parameter.KEYWORD_ONLY, default=None)
    at = next((i for i, p in enumerate(parameters) if p.kind is inspect.Parameter.VAR_KEYWORD), len(parameters))
    return signature.replace(parameters=[*parameters[:at], lock, *parameters[at:]])


def action_form(name: str, batch_class: type | None) -> tuple[inspect.Signature, str | None, str]:
    """The parameters, docstring and module of the action ``name`` as users call it: a built-in's form, or the
    batch method's without ``self`` (of ``batch_class``, or, with no dataset bound yet, of the first ``Batch``
    class that defines it); every action also takes ``use_lock`` (run it under the pipeline's lock). An action
    of a batch class not known yet keeps ``(*args, **kwargs)``: it is checked on the first batch."""
    spec = get_builtin(name)
    if spec is not None:
        return _with_use_lock(spec.call_form()), spec.func.__doc__, spec.func.__module__
    method = _batch_method(name, batch_class)
    if method is None:
        return _with_use_lock(inspect.signature(lambda *args, **kwargs: None)), None, __name__
    parameters = list(inspect.signature(method).parameters.values())[1:]
    return _with_use_lock(inspect.Signature(parameters)), method.__doc__, method.__module__


def _batch_method(name: str, batch_class: type | None) -> Callable | None:
    from ..batch import Batch
    pending, seen = [batch_class] if batch_class is not None else [Batch], set()
    while pending:
        klass = pending.pop(0)
        if klass in seen:
            continue
        seen.add(klass)
        if name in batch_action_names(klass):
            return getattr(klass, name)
        if batch_class is None:
            pending.extend(klass.__subclasses__())
    return None


def make_record(name: str, args: tuple, kwargs: dict) -> ActionRecord:
    """The frozen record of ``name(*args, **kwargs)``, with ``use_lock`` taken out and built-ins validated (their
    keywords, then their ``on_declare``)."""
    kwargs = dict(kwargs)
    use_lock = kwargs.pop('use_lock', None)
    if use_lock is not None and not isinstance(use_lock, bool):
        raise TypeError(f"Expected use_lock to be True or False. Received: use_lock={use_lock!r}")
    spec = get_builtin(name)
    if spec is not None:
        spec.check_call(args, kwargs)       # here, once for all built-ins: before on_declare's own checks
    if spec is not None and spec.on_declare is not None:
        args, kwargs = spec.on_declare(tuple(args), kwargs)
    return ActionRecord(name, tuple(args), kwargs, use_lock)
