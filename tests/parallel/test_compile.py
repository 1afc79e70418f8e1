"""``compile``: one torch.compile wrapper per replica, the same steps as without it, and the shapes rule.

Most tests compile with the ``eager`` backend (TorchDynamo traces and guards as always, the graph runs as
recorded: seconds, not minutes); one slow test compiles with inductor, the default backend.
"""
import copy

import pytest
import torch
from torch.nn import functional as F

from flowpipe.parallel import build_engine, make_plan

from .test_engines import assert_same_parameters, convnet, data, engine_step, reference_step

CPUS = ['CPU:0', 'CPU:1']


class CountingBackend:
    """A ``torch.compile`` backend that runs graphs as recorded and counts the graphs it is given."""

    def __init__(self):
        self.shapes = []

    def __call__(self, graph, example_inputs):
        self.shapes.append(tuple(tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor))[-1:])
        return graph.forward


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize('device, microbatch', [('CPU:0', None), ('CPU:0', 4), (CPUS, None), (CPUS, 3)])
def test_compiled_steps_equal_the_default_steps(device, microbatch):
    model, (inputs, targets) = convnet(), data(10, (2, 6, 6))
    expected, expected_loss = reference_step(model, inputs, targets, torch.optim.Adam, steps=3, lr=0.01)
    plan = make_plan(device, microbatch, compile={'backend': 'eager'}, num_gpus=0)
    actual, loss, replicas = engine_step(model, plan, inputs, targets, torch.optim.Adam, steps=3, lr=0.01)
    assert loss == pytest.approx(expected_loss, rel=1e-10)
    for replica in replicas:
        assert_same_parameters(replica, expected)


def test_each_replica_has_its_own_compiled_module_and_the_primary_keeps_its_state():
    with build_engine(convnet(), make_plan(CPUS, compile={'backend': 'eager'}, num_gpus=0)) as engine:
        assert len(engine.forwards) == 2 and engine.forwards[0] is not engine.forwards[1]
        for forward, replica in zip(engine.forwards, engine.replicas):
            assert forward is not replica and forward._orig_mod is replica
        assert not any(key.startswith('_orig_mod') for key in engine.state_dict())
        assert 'torch.compile(backend=' in engine.plan.describe()


def compiled_graphs(options, sizes, device='CPU:0', microbatch=None):
    backend = CountingBackend()
    with build_engine(convnet(), make_plan(device, microbatch, compile={'backend': backend, **options},
                                           num_gpus=0)) as engine:
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
        inputs, targets = data(max(sizes), (2, 6, 6))
        for size in sizes:
            engine.train_step([inputs[:size]], [targets[:size]], F.cross_entropy, optimizer)
    return backend.shapes


def test_the_last_shorter_batch_compiles_once_more_then_sizes_are_symbolic():
    # by default torch compiles the first size as it is, and the first other size with a symbolic batch size
    assert len(compiled_graphs({}, [12, 12, 7, 12, 5, 9])) == 2


def test_dynamic_true_compiles_once_and_dynamic_false_once_per_size():
    assert len(compiled_graphs({'dynamic': True}, [12, 7, 12, 5])) == 1
    assert len(compiled_graphs({'dynamic': False}, [12, 7, 12, 5])) == 3


def test_a_piece_of_one_item_is_its_own_graph():
    assert len(compiled_graphs({}, [12, 7, 1, 9])) == 3
    assert len(compiled_graphs({'dynamic': True}, [12, 1])) == 2


def test_micro_batches_with_a_shorter_last_chunk_follow_the_same_rule():
    # chunks of 4 from a batch of 10: sizes 4, 4, 2 -> the static graph of 4 and one symbolic graph
    assert len(compiled_graphs({}, [10, 10], microbatch=4)) == 2
    assert len(compiled_graphs({}, [8, 8], microbatch=4)) == 1      # chunks that divide the batch: one graph


def test_prediction_after_training_runs_the_compiled_module_in_evaluation_mode():
    model, (inputs, _) = convnet(), data(6, (2, 6, 6))
    with build_engine(copy.deepcopy(model), make_plan(compile={'backend': 'eager'}, num_gpus=0)) as engine:
        torch.testing.assert_close(engine.predict([inputs]), model.eval()(inputs.double()), rtol=1e-12, atol=1e-14)


@pytest.fixture
def inductor_workers_stopped():
    """Inductor compiles in a pool of threads it keeps: stop them, so that the test leaves no thread behind."""
    yield
    from torch._inductor.async_compile import AsyncCompile, shutdown_compile_workers
    shutdown_compile_workers()
    AsyncCompile.pool().shutdown(wait=True)
    AsyncCompile.pool.cache_clear()


@pytest.mark.slow
def test_inductor_compiled_training_tracks_the_default_steps(inductor_workers_stopped):
    model, (inputs, targets) = convnet().float(), data(8, (2, 6, 6))
    expected = [engine_step(model, make_plan(num_gpus=0), inputs, targets, steps=n, lr=0.1)[1] for n in (1, 2)]
    plan = make_plan(compile=True, memory_format='channels_last', num_gpus=0)    # one graph: minutes on a CPU
    got = [engine_step(model, plan, inputs, targets, steps=n, lr=0.1)[1] for n in (1, 2)]
    assert got == pytest.approx(expected, rel=1e-5)
