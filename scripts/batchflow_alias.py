"""Import alias that makes ``import batchflow`` (and its submodules) load flowpipe's modules.

Used by ``scripts/batchflow_compat.sh`` as a pytest plugin (``-p batchflow_alias``) so that batchflow's own test
files run, unchanged, against flowpipe. Nothing here implements batchflow: ``batchflow.X`` *is* ``flowpipe.X``.
"""
import importlib
import importlib.abc
import importlib.util
import sys

SOURCE, TARGET = 'batchflow', 'flowpipe'


class AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``batchflow[.sub]`` to the already importable ``flowpipe[.sub]`` module object."""

    def __init__(self) -> None:
        self._specs = {}

    def find_spec(self, name, path=None, target=None):
        if name != SOURCE and not name.startswith(SOURCE + '.'):
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        module = importlib.import_module(TARGET + spec.name[len(SOURCE):])
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # the import system overwrote the real module's spec with the alias spec: put it back
        module.__spec__ = self._specs.pop(module.__spec__.name)


def install() -> None:
    """Puts the alias first on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(finder, AliasFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, AliasFinder())


install()
