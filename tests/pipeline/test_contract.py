"""Every built-in and batch action: a new pipeline on declaration, lazy until run, same with prefetch."""
import pytest

from flowpipe.expr import B, V
from flowpipe.pipeline import Pipeline, builtin_names

from .contract import check_lazy, check_returns_new_pipeline, check_same_with_prefetch
from .helpers import make_dataset

# Arguments that make each action valid; built-ins registered by other modules bring their own contract tests.
SAMPLES = {
    'init_variable': (('v', 0), {}),
    'update': ((V('v'), B().size), {}),
    'save_to': ((V('v'), B().size), {}),
    'call': ((len, [1]), {'save_to': V('v')}),
    'print': (('hello',), {}),
    'rebatch': ((3,), {}),
    'join': ((Pipeline(),), {}),
    'merge': ((Pipeline(),), {}),
    'add': ((1,), {}),
    'scale': ((2,), {}),
    'absorb': ((), {}),
    'fail': ((), {}),
    'record': (([],), {}),
    'add_components': (('y',), {}),
    'apply_parallel': ((abs,), {'src': 'x'}),
    'do_nothing': ((B().size,), {}),
    'to_device': (('cpu',), {}),
    'load': ((), {'src': {'x': list(range(100))}}),
}
OWN_BUILTINS = ('init_variable', 'update', 'save_to', 'call', 'print', 'rebatch', 'join', 'merge')


def test_samples_cover_own_builtins_and_batch_actions():
    assert set(OWN_BUILTINS) <= set(builtin_names())
    assert set(make_dataset().batch_class.action_names()) <= set(SAMPLES)


@pytest.mark.parametrize('name', sorted(SAMPLES))
def test_declaring_returns_a_new_pipeline(name):
    args, kwargs = SAMPLES[name]
    check_returns_new_pipeline(make_dataset().p, name, *args, **kwargs)
    check_returns_new_pipeline(Pipeline(), name, *args, **kwargs)


@pytest.mark.parametrize('name', ['update', 'save_to', 'call', 'add', 'scale', 'add_components', 'load'])
def test_actions_run_only_when_batches_are_requested(name):
    args, kwargs = SAMPLES[name]

    def build(calls):
        probe = make_dataset().p.init_variable('v').call(calls.append, 1)
        return getattr(probe, name)(*args, **kwargs)
    check_lazy(build)


def test_call_is_lazy_itself():
    check_lazy(lambda calls: make_dataset().p.call(calls.append, B().size))


@pytest.mark.parametrize('chain', [
    lambda p: p.add(1).scale(3).init_variable('v', []).update(V('v', mode='a'), B().x.tolist(), use_lock=True),
    lambda p: p.init_variable('v', []).update(V('v', mode='a'), B().x.sum(), use_lock=True),
    lambda p: p.init_variable('v', []).call(lambda b: b.indices.tolist(), B(), save_to=V('v', mode='e'),
                                            use_lock=True),
    lambda p: p.init_variable('v', []).record(V('v')),
    lambda p: (p.add(5) @ 0.5).init_variable('v', []).update(V('v', mode='a'), B().x.sum(), use_lock=True),
    lambda p: p.init_variable('v', []).rebatch(3).update(V('v', mode='a'), B().x.tolist()),
])
def test_same_variables_with_and_without_prefetch(chain):
    check_same_with_prefetch(lambda: chain(make_dataset(20).p), lambda pipeline: pipeline.v('v'))


def test_same_batches_with_and_without_prefetch():
    def batches(prefetch):
        pipeline = make_dataset(20).p.add(1) @ 0.5
        return [batch.x.tolist() for batch in pipeline.gen_batch(3, shuffle=True, seed=9, prefetch=prefetch)]
    assert batches(0) == batches(4)
