"""Engines take where a step lies in its run from the call (``run=``, a ``RunContext``), never from the run loop's
context variables (``stepping``, ``WHOLE_BATCHES``): the same call gives the same result inside and outside a run."""
import pytest

from flowpipe.data.shards import NO_RUN, WHOLE_BATCHES, RunContext, Shard, run_context, stepping
from flowpipe.parallel import launch

from . import run_context_jobs

pytestmark = pytest.mark.slow       # two processes each: CI or FLOWPIPE_SLOW=1
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


def test_the_run_context_is_what_the_run_loop_sets_and_nothing_outside_a_run():
    from types import SimpleNamespace
    assert run_context() is NO_RUN == RunContext()
    shard = Shard(0, 2, 4, 0, 3)
    with stepping(SimpleNamespace(shard=shard)):
        token = WHOLE_BATCHES.set('every')
        try:
            assert run_context() == RunContext(shard, 'every')
        finally:
            WHOLE_BATCHES.reset(token)
    assert run_context() is NO_RUN


@pytest.mark.parametrize('sharding', [None, 'full'])
def test_a_distributed_engine_reads_the_run_from_its_call_only(sharding):
    results = launch(run_context_jobs.context_in_the_call, 2, args=(sharding,), timeout=TIMEOUT)
    for rank, result in enumerate(results):
        assert 'global batch 0 on rank 0, global batch 1 on rank 1' in result['given'], (rank, result['given'])
        assert result['context only'] is None
        assert result['loss in context only'] == pytest.approx(result['own loss'], rel=1e-12)
        assert 'Validate(..., shard=False)' in (result['split given'] or '') if sharding else (
            result['split given'] is None)
        assert result['split in context only'] is None
    # the loss of a shard given in the call is the global batch's: the mean of the ranks' equal-sized shards
    mean = (results[0]['own loss'] + results[1]['own loss']) / 2
    assert results[0]['loss given'] == results[1]['loss given'] == pytest.approx(mean, rel=1e-12)
    assert results[0]['own loss'] != pytest.approx(mean, rel=1e-6)
