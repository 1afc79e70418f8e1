"""The registry of built-in pipeline actions (``init_variable``, ``call``, ``train_model``...).

A built-in is a function ``func(ctx, *args, **kwargs)`` that receives the batch's ``Context`` and the action's
arguments. ``Pipeline`` looks names up here before the batch class; ``flowpipe.pipeline.builtins`` and
``flowpipe.pipeline.model_actions`` fill the registry when the package is imported.
"""
from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from typing import Any, Callable

from .records import format_call

__all__ = ['Builtin', 'builtin', 'builtin_names', 'get_builtin']


@dataclass(frozen=True)
class Builtin:
    """One built-in action.

    Attributes:
        name: the action's name in a pipeline chain.
        func: ``func(ctx, *args, **kwargs)``; a returned value other than ``None`` (a batch) replaces the
            current batch.
        evaluate: evaluate named expressions in the arguments before calling ``func``.
        on_declare: optional ``(args, kwargs) -> (args, kwargs)`` run when the action is added to a pipeline,
            to validate or normalise arguments early (errors then point at the user's chain, not at a run).
        keep: keyword arguments passed unevaluated even when ``evaluate`` is true: the action's assignment
            targets (``save_to=V('x')``). Under prefetch they may arrive wrapped so that a write to a variable
            waits for its batch's turn: write through them with ``assign(target, value, ctx)`` or ``.set``.
        per_batch: ``False`` for declarations (``init_variable``) that the pipeline applies once, before
            the first batch, instead of on every batch.
        join_at: where the batches of a preceding ``join`` go among the positional arguments (``call``
            puts them after the function).
        model_access: ``'write'`` or ``'read'`` for a model step that changes or only uses the model named by
            its first argument (``train_model``, ``predict_model``); ``None`` otherwise. The execution engine
            orders model steps by it and never runs one ahead of the caller (see ``docs/design.md``).
        signature: a function (without ``ctx``) whose parameters are the arguments users pass, for a built-in
            whose ``func`` takes others (``rebatch``) or whose ``on_declare`` rewrites them (``update``);
            ``None`` when they are ``func``'s after ``ctx``. ``check_call`` checks a declaration against it.
    """
    name: str
    func: Callable[..., Any]
    evaluate: bool = True
    on_declare: Callable[[tuple, dict], tuple[tuple, dict]] | None = None
    keep: tuple[str, ...] = ()
    per_batch: bool = True
    join_at: int = 0
    model_access: str | None = None
    signature: Callable[..., Any] | None = None

    def call_form(self) -> inspect.Signature:
        """The arguments users pass to the action, without annotations (``func``'s without ``ctx`` by default)."""
        if self.signature is not None:
            parameters = list(inspect.signature(self.signature).parameters.values())
        else:
            parameters = list(inspect.signature(self.func).parameters.values())[1:]
        return inspect.Signature([parameter.replace(annotation=inspect.Parameter.empty) for parameter in parameters])

    def check_call(self, args: tuple, kwargs: dict) -> None:
        """Raise ``TypeError`` for a call of the action that its form refuses: an unknown keyword (close ones are
        suggested), a missing or an extra argument.

        A form with ``**kwargs`` (``call``, ``train_model``) takes any keyword. The arguments are bound to the form
        only when it is the one users call: ``func``'s without an ``on_declare``, or ``signature``; an
        ``on_declare`` without ``signature`` (``init_model``) reads its arguments itself.
        """
        form = self.call_form()
        kinds = {name: parameter.kind for name, parameter in form.parameters.items()}
        if inspect.Parameter.VAR_KEYWORD not in kinds.values():
            named = [name for name, kind in kinds.items()
                     if kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
            for key, value in kwargs.items():
                if key not in named:
                    close = difflib.get_close_matches(key, named, n=3, cutoff=0.6)
                    hint = f"Did you mean {' or '.join(map(repr, close))}?" if close else "Pass only those keywords."
                    received = format_call('', (), {key: value})[1:-1]       # key=value, a long value shortened
                    raise TypeError(f"Expected {self.name}{form}. Received: unknown keyword {received} of the "
                                    f"built-in action {self.name!r}. {hint}")
        if self.signature is None and self.on_declare is not None:
            return
        try:
            form.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"Expected {self.name}{form}. Received: {format_call(self.name, args, kwargs)} "
                            f"({error}).") from None


_BUILTINS: dict[str, Builtin] = {}


def builtin(name: str | None = None, *, evaluate: bool = True,
            on_declare: Callable[[tuple, dict], tuple[tuple, dict]] | None = None,
            keep: tuple[str, ...] = (), per_batch: bool = True, join_at: int = 0,
            model_access: str | None = None, signature: Callable[..., Any] | None = None) -> Callable:
    """Register ``func`` as the built-in action ``name`` (the function's name by default).

    The keyword options are the fields of ``Builtin``.
    """
    if model_access not in (None, 'read', 'write'):
        raise ValueError(f"Expected model_access 'read', 'write' or None. Received: model_access={model_access!r}")

    def register(func: Callable) -> Callable:
        action_name = name or func.__name__
        if action_name in _BUILTINS:
            raise ValueError(f"Expected a new built-in action name. Received: name={action_name!r}, already registered")
        _BUILTINS[action_name] = Builtin(action_name, func, evaluate, on_declare, tuple(keep), per_batch, join_at,
                                         model_access, signature)
        return func
    return register


def get_builtin(name: str) -> Builtin | None:
    """The built-in registered as ``name``, or ``None``."""
    return _BUILTINS.get(name)


def builtin_names() -> tuple[str, ...]:
    """Names of all registered built-ins, sorted."""
    return tuple(sorted(_BUILTINS))
