"""The root expressions ``B C V D F R I W P M`` and batchflow's ``L`` and ``PP``: instances that build
expressions when called.

They are objects rather than classes so that ``B.images`` is plain attribute access (no metaclass). ``B``,
``C``, ``V``, ``D``, ``M``, ``L`` and ``I`` also build expressions from attributes (``B.images == B('images')``,
``I.current == I('current')``). Used unevaluated, ``B``, ``C`` and ``D`` stand for ``B()``, ``C()`` and
``D()``.
"""
from __future__ import annotations

from typing import Any, Callable

from .base import Expression
from .listwise import ListExpr
from .named import BatchExpr, ConfigExpr, DatasetExpr, ModelExpr, VariableExpr
from .special import FuncExpr, IterationExpr, PerItemExpr, RandomExpr, WrapExpr

__all__ = ['B', 'C', 'D', 'F', 'I', 'L', 'M', 'P', 'PP', 'R', 'Root', 'V', 'W']


class Root(Expression):
    """A root such as ``B``: ``root(...)`` and (for named roots) ``root.name`` build expressions."""
    __slots__ = ('_letter', '_factory', '_by_attribute', '_alone')

    def __init__(self, letter: str, factory: Callable[..., Expression], by_attribute: bool = False,
                 alone: bool = False):
        self._letter, self._factory = letter, factory
        self._by_attribute, self._alone = by_attribute, alone

    def __call__(self, *args: Any, **kwargs: Any) -> Expression:
        return self._factory(*args, **kwargs)

    @property
    def __name__(self) -> str:
        """The root's letter, as the name of batchflow's class of the same letter (what tools that name classes
        and functions show, e.g. pytest's test ids)."""
        return self._letter

    def __getattr__(self, name: str) -> Expression:
        if name.startswith('_'):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if not self._by_attribute:
            raise AttributeError(f"Expected {self._letter}(...) called with arguments. Received: "
                                 f"{self._letter}.{name}. Attribute access builds expressions only on B, C, V, D, M, L, I.")
        return self._factory(name)

    def get(self, ctx: Any) -> Any:
        if not self._alone:
            raise TypeError(f"Expected {self._letter}(...) with arguments inside an action. Received: {self._letter} "
                            "itself. Call it, e.g. V('name'), F(func)(args) or I('c').")
        return self._factory().get(ctx)

    def __repr__(self) -> str:
        return self._letter

    def __reduce__(self):
        # Roots unpickle to the module's own instances, so ``B`` stays ``B`` after a round trip.
        return self._letter


B = Root('B', BatchExpr, by_attribute=True, alone=True)
C = Root('C', ConfigExpr, by_attribute=True, alone=True)
V = Root('V', VariableExpr, by_attribute=True)
D = Root('D', DatasetExpr, by_attribute=True, alone=True)
M = Root('M', ModelExpr, by_attribute=True)
F = Root('F', FuncExpr)
R = Root('R', RandomExpr)
I = Root('I', IterationExpr, by_attribute=True)  # noqa: E741 - the one-letter name is the public API
W = Root('W', WrapExpr)
P = Root('P', PerItemExpr)
L = Root('L', ListExpr, by_attribute=True)
PP = Root('PP', lambda inner: PerItemExpr(inner, each=True))
