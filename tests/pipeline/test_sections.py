"""The chained method every action name becomes shows the action's own parameters and docstring
(``inspect.signature``, ``help()``, a notebook's Shift-Tab), for built-ins and for batch actions, with or without a
dataset bound."""
import inspect

import pytest

from flowpipe import Pipeline
from flowpipe.batch import Batch
from flowpipe.opensets import Digits
from flowpipe.pipeline.names import batch_action_names
from flowpipe.pipeline.registry import builtin_names

VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _batch_classes():
    pending, found = [Batch], []
    while pending:
        klass = pending.pop()
        if klass not in found:
            found.append(klass)
            pending.extend(klass.__subclasses__())
    return found


def _own_parameters(signature):
    """The parameters other than ``use_lock`` and a bare ``*args``/``**kwargs``."""
    return [name for name, parameter in signature.parameters.items() if name != 'use_lock' and not (
        parameter.kind in VARIADIC and name in ('args', 'kwargs'))]


@pytest.mark.parametrize('name', builtin_names())
def test_every_built_in_action_shows_its_own_parameters(name):
    method = getattr(Pipeline().before if name in ('init_variable',) else Pipeline(), name)
    signature = inspect.signature(method)
    assert _own_parameters(signature), f'{name}{signature}'
    assert 'use_lock' in signature.parameters
    assert method.__doc__ and method.__name__ == name


def test_every_batch_action_shows_its_own_parameters():
    names = sorted({name for klass in _batch_classes() for name in batch_action_names(klass)})
    assert len(names) > 20
    for name in names:
        signature = inspect.signature(getattr(Pipeline(), name))
        method = next(getattr(klass, name) for klass in _batch_classes() if name in batch_action_names(klass))
        expected = list(inspect.signature(method).parameters)[1:]
        assert [key for key in signature.parameters if key != 'use_lock'] == expected, name
        assert getattr(Pipeline(), name).__doc__ == method.__doc__


def test_the_forms_in_help_are_those_users_type():
    assert str(inspect.signature(Pipeline().train_model)) == (
        '(name, *args, fetches=None, save_to=None, use_lock=None, **inputs)')
    bound = Pipeline() << Digits().train
    assert list(inspect.signature(bound.resize).parameters)[:2] == ['size', 'mode']
    assert 'Train the model' in Pipeline().train_model.__doc__
