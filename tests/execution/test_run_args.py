"""RunArgs: the one list of run options behind run, gen_batch and next_batch."""
import inspect
from dataclasses import fields

import pytest

from flowpipe.execution import RunArgs
from flowpipe.pipeline import Pipeline

from tests.pipeline.helpers import make_dataset

# Arguments of the methods that are not run options: what to do with the run rather than how to run it.
_NOT_OPTIONS = {'self', 'lazy', 'reset', 'notifier', 'kwargs'}


@pytest.mark.parametrize('method', ['run', 'gen_batch', 'next_batch'])
def test_every_named_argument_is_a_run_option_that_reaches_run_args(method):
    options = {f.name for f in fields(RunArgs)} - {'extra'}
    named = set(inspect.signature(getattr(Pipeline, method)).parameters) - _NOT_OPTIONS
    assert named <= options
    given = {name: value for name, value in {'batch_size': 3, 'shuffle': 7, 'n_iters': 2, 'drop_last': True,
                                            'bar': False, 'prefetch': 1, 'seed': 5, 'profile': True,
                                            'target': 'threads'}.items() if name in named}
    assert RunArgs.options({**given, 'self': None, 'lazy': True, 'other': 1}) == given


def test_in_processes_is_prefetch_in_worker_processes():
    assert RunArgs(prefetch=2, target='processes').in_processes
    assert not RunArgs(prefetch=0, target='processes').in_processes
    assert not RunArgs(prefetch=2, target='threads').in_processes


@pytest.mark.parametrize('workers, error', [(0, ValueError), (1.5, TypeError), (True, TypeError)])
def test_workers_is_a_positive_count_or_none(workers, error):
    assert RunArgs.merge(None, prefetch=2, workers=3).workers == 3
    with pytest.raises(error, match=f'workers={workers!r}'):
        RunArgs.merge(None, prefetch=2, workers=workers)


def test_next_batch_rebuilds_the_arguments_only_when_an_option_changes():
    pipeline = make_dataset().p
    pipeline.next_batch(2, shuffle=1, seed=3)
    first = pipeline.state.next_args[1]
    pipeline.next_batch(2, shuffle=1, seed=3)
    assert pipeline.state.next_args[1] is first
    pipeline.next_batch(2, shuffle=True, seed=3)          # equal to 1, yet another run
    assert pipeline.state.next_args[1].shuffle is True
