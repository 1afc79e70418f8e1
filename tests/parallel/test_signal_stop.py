"""A signal sent to one rank of a 2-rank gloo job in the middle of a batch stops both ranks after that batch with
its checkpoint; the resumed job ends with the parameters and losses of the job never stopped."""
import signal

import numpy as np
import pytest

from flowpipe.parallel import launch

from . import signal_jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


@pytest.mark.parametrize('name', ['SIGTERM', 'SIGUSR1'])
def test_a_signal_to_one_rank_stops_every_rank_after_the_same_batch(tmp_path, name):
    reference = launch(signal_jobs.train, 2, args=(str(tmp_path / 'reference'),), timeout=TIMEOUT)
    folder = str(tmp_path / 'stopped')
    stopped = launch(signal_jobs.train, 2, args=(folder, 4, 1, name), timeout=TIMEOUT)
    assert [rank['code'] for rank in stopped] == [128 + getattr(signal, name)] * 2
    assert [rank['batches'] for rank in stopped] == [5, 5]              # batch 4 completed on both, no later one
    assert stopped[0]['files'] == ['checkpoint-000000005.flowpipe']
    resumed = launch(signal_jobs.train, 2, args=(folder,), timeout=TIMEOUT)
    for rank in range(2):
        assert resumed[rank]['code'] is None and resumed[rank]['loss'] == reference[rank]['loss']
        assert all(np.array_equal(got, want) for got, want in zip(resumed[rank]['params'], reference[rank]['params']))
    assert resumed[0]['files'] == ['checkpoint-000000012.flowpipe']
