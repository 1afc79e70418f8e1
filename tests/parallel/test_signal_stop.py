"""A signal sent to one rank of a 2-rank gloo job in the middle of a batch stops both ranks after the same batch with
its checkpoint; the resumed job ends with the parameters and losses of the job never stopped.

The ranks agree on the stop in the exchange of item counts at a batch's training step: a signal that comes before
it stops them after that batch, one that comes after it (later in the batch) after the next batch."""
import signal

import numpy as np
import pytest

from flowpipe.parallel import launch

from . import signal_jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


@pytest.fixture(scope='module')
def reference(tmp_path_factory, default_dtype):
    return launch(signal_jobs.train, 2, args=(str(tmp_path_factory.mktemp('reference')),), timeout=TIMEOUT)


# without prefetch a signal before the training step comes in its batch (with it, in an earlier batch's step)
@pytest.mark.parametrize('name, where, prefetch, batches', [('SIGTERM', 'before', 0, 5), ('SIGUSR1', 'before', 0, 5),
                                                            ('SIGTERM', 'after', 2, 6)])
def test_a_signal_to_one_rank_stops_every_rank_after_the_same_batch(tmp_path, reference, name, where, prefetch,
                                                                     batches):
    folder = str(tmp_path / 'stopped')
    stopped = launch(signal_jobs.train, 2, args=(folder, 4, 1, name, where, prefetch), timeout=TIMEOUT)
    assert [rank['code'] for rank in stopped] == [128 + getattr(signal, name)] * 2
    # batch 4 (from 0) completed on both, and the next one too when the signal came after its exchange; no later one
    assert [rank['batches'] for rank in stopped] == [batches, batches]
    assert stopped[0]['files'] == [f'checkpoint-{batches:09d}.flowpipe']
    resumed = launch(signal_jobs.train, 2, args=(folder, None, 1, name, where, prefetch), timeout=TIMEOUT)   # the same run
    for rank in range(2):
        assert resumed[rank]['code'] is None and resumed[rank]['loss'] == reference[rank]['loss']
        assert all(np.array_equal(got, want) for got, want in zip(resumed[rank]['params'], reference[rank]['params']))
    assert resumed[0]['files'] == ['checkpoint-000000012.flowpipe']
