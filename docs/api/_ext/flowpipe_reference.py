"""Two directives for flowpipe's API reference, so that its pages follow the code instead of lists kept by hand.

``.. flowpipe-package:: flowpipe.callbacks`` documents every name of the package's ``__all__`` (a class with its
public methods, a function, a value), each object once in the whole reference: a name that another package
already documented points there. ``.. flowpipe-actions::`` documents every pipeline action as a chain calls it
(``flowpipe.pipeline.sections.action_form``: the built-ins, then each batch class's own actions).
"""
from __future__ import annotations

import importlib
import inspect
import types

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.ext.napoleon import Config as NapoleonConfig
from sphinx.ext.napoleon.docstring import GoogleDocstring
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


#: the objects documented so far in this build: id -> the name they are documented under
_DOCUMENTED: dict[int, str] = {}


def _indented(lines: list[str], by: str = '   ') -> list[str]:
    return [by + line if line else '' for line in lines]


def _docstring(text: str | None) -> list[str]:
    """A Google-style docstring as reStructuredText (as napoleon turns autodoc's)."""
    config = NapoleonConfig(napoleon_use_param=True, napoleon_use_rtype=True, napoleon_use_ivar=True)
    return str(GoogleDocstring(inspect.cleandoc(text or ''), config)).splitlines()


class _Rendered(SphinxDirective):
    """A directive whose content is reStructuredText it makes itself."""

    def rendered(self, lines: list[str]) -> list[nodes.Node]:
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=self.get_source_info()[0]), container)
        return container.children


class PackageDirective(_Rendered):
    """``.. flowpipe-package:: NAME``: the public names of package ``NAME``."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        package = self.arguments[0]
        module = importlib.import_module(package)
        seen = _DOCUMENTED
        lines = [f'``{package}``', '-' * (len(package) + 4), '']
        for name in getattr(module, '__all__', ()):
            value = getattr(module, name)
            key = id(value) if isinstance(value, (type, types.FunctionType, types.ModuleType)) else None
            if key is not None and key in seen:
                lines += [f'.. py:data:: {package}.{name}', '',
                          f'   The same object as :py:obj:`{seen[key]}`.', '']
                continue
            if key is not None:
                seen[key] = f'{package}.{name}'
            lines += self._entry(package, name, value)
        return self.rendered(lines)

    @staticmethod
    def _entry(package: str, name: str, value: object) -> list[str]:
        if isinstance(value, type):
            return [f'.. autoclass:: {package}.{name}', '   :members:', '   :show-inheritance:', '']
        if isinstance(value, types.FunctionType) or inspect.isbuiltin(value):
            return [f'.. autofunction:: {package}.{name}', '']
        if isinstance(value, types.ModuleType):
            return [f'.. py:module:: {value.__name__}', '   :no-index:', '',
                    *_indented(_docstring(value.__doc__)), '']
        return [f'.. py:data:: {package}.{name}', '', f'   ``{type(value).__name__}``: {_summary(value)}', '']


def _summary(value: object) -> str:
    text = repr(value).replace('`', "'")
    return text if len(text) < 80 else text[:77] + '...'


class ActionsDirective(_Rendered):
    """``.. flowpipe-actions::``: every built-in action, then the actions each batch class defines."""

    def run(self) -> list[nodes.Node]:
        from flowpipe import opensets  # noqa: F401 - the batch classes of the shipped data sets
        from flowpipe.batch import Batch
        from flowpipe.pipeline.names import batch_action_names
        from flowpipe.pipeline.registry import builtin_names
        from flowpipe.pipeline.sections import action_form
        lines = ['Built-in actions', '----------------', '']
        for name in builtin_names():
            lines += self._action(name, *action_form(name, None)[:2])
        for klass in _batch_classes(Batch):
            own = [name for name in batch_action_names(klass) if name in vars(klass)]
            if not own:
                continue
            title = f'Actions of ``{klass.__module__}.{klass.__qualname__}``'
            lines += [title, '-' * len(title), '']
            for name in own:
                lines += self._action(name, *action_form(name, klass)[:2])
        return self.rendered(lines)

    @staticmethod
    def _action(name: str, signature: inspect.Signature, doc: str | None) -> list[str]:
        shown = str(signature.replace(return_annotation=inspect.Signature.empty))
        return [f'.. py:function:: {name}{shown}', '   :no-index:', '', *_indented(_docstring(doc)), '']


def _batch_classes(base: type) -> list[type]:
    found, pending = [], [base]
    while pending:
        klass = pending.pop(0)
        if klass not in found and klass.__module__.startswith('flowpipe'):
            found.append(klass)
            pending.extend(klass.__subclasses__())
    return found


def setup(app: object) -> dict:
    app.connect('builder-inited', lambda app: _DOCUMENTED.clear())
    app.add_directive('flowpipe-package', PackageDirective)
    app.add_directive('flowpipe-actions', ActionsDirective)
    return {'parallel_read_safe': False}
