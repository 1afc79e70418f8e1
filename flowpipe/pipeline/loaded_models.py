"""Which models ``load_model`` loaded, from which file: the action loads once per pipeline (until the model is
reset or registered anew), and a run checkpoint keeps the files so that a resumed run does not load them again
(``flowpipe.execution.resume``). The model actions themselves are in ``model_actions.py``.
"""
from __future__ import annotations

import weakref

from ..expr.context import Store

__all__ = ['forget_load', 'is_loaded', 'load_records', 'loaded_files', 'mark_loaded']


def load_records(models: Store) -> dict:
    """``{name: (weak reference to the model, file)}`` of what ``load_model`` loaded into this store.

    The record lives beside the store rather than in it (it is no model), and holds the model weakly so that
    ``reset('models')`` still frees it; a name registered anew by ``init_model``/``import_model`` drops its record.
    """
    loads = getattr(models, 'model_loads', None)
    if loads is None:
        loads = models.model_loads = {}
    return loads


def is_loaded(models: Store, name: str, source: str) -> bool:
    record = load_records(models).get(name)
    current = models.get(name)
    return record is not None and current is not None and record[0]() is current and record[1] == source


def forget_load(models: Store, name: str) -> None:
    load_records(models).pop(name, None)


def loaded_files(models: Store) -> dict[str, str]:
    """``{name: file}`` of the models ``load_model`` loaded that are still registered (a checkpoint keeps them)."""
    with models.lock:
        return {name: source for name, (_, source) in load_records(models).items() if is_loaded(models, name, source)}


def mark_loaded(models: Store, files: dict[str, str]) -> None:
    """Record the registered models ``files`` names as loaded from them, so ``load_model`` does not load again."""
    with models.lock:
        for name, source in files.items():
            load_records(models)[name] = (weakref.ref(models[name]), source)
