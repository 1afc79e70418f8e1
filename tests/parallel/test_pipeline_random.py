"""Dropout drawing by item (the default ``'randomness'``) and bfloat16 autocast (``amp``) in a pipeline: 2 stages on
2 gloo processes, 1F1B and GPipe, a loss that is a mean and one that is a sum, and dropout on 2 stages x 2 pipelines
on 4, each equal to one process on the whole batch (float64 parameters: 1e-10 relative; under ``amp`` the float32
parameters of one process with the same micro-batches), under a float32 and a float64 default dtype."""
import numpy as np
import pytest
from torch import nn

from flowpipe.parallel import launch

from . import pipeline_relayout_jobs as jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine
SUM = nn.CrossEntropyLoss(reduction='sum')
CASES = {'1f1b': {'dropout': True},               # parts of 5 items: micro-batches [2, 2, 1]; the last of 3: [2, 1]
         'gpipe-sum': {'dropout': True, 'schedule': 'gpipe', 'loss': SUM},
         'amp': {'amp': 'bfloat16'},
         'amp-dropout': {'amp': 'bfloat16', 'dropout': True, 'schedule': 'gpipe'}}


def _rel(result, reference):
    assert sorted(result['params']) == sorted(reference['params'])
    return max(float(np.max(np.abs(result['params'][name] - value)) / np.max(np.abs(value)))
               for name, value in reference['params'].items())


@pytest.fixture(scope='module')
def two(default_dtype):
    ranks = launch(jobs.runs, 2, args=([(name, (None, None, {'stages': 2, **kwargs}))
                                        for name, kwargs in CASES.items()],), timeout=TIMEOUT)
    return {name: [rank[name] for rank in ranks] for name in CASES}


@pytest.mark.parametrize('name', list(CASES))
def test_two_stages_equal_one_process(two, name):
    reference = jobs.train(**CASES[name])
    # the fetched loss: the micro-batches' float32 losses summed in float64 by the stages, in float32 by one process
    rtol = 1e-6 if 'amp' in CASES[name] else 1e-10
    for rank, result in enumerate(two[name]):
        assert _rel(result, reference) < 1e-10
        np.testing.assert_allclose(result['loss'], reference['loss'], rtol=rtol)
        assert result['stages'] == 2 and ('0.weight' in result['held']) == (rank == 0)


def test_the_masks_and_the_autocast_change_the_training():
    """What the cases above compare is not the plain training: dropout and bfloat16 each move the parameters."""
    plain, dropout, amp = jobs.train(), jobs.train(dropout=True), jobs.train(amp='bfloat16')
    assert not np.allclose(plain['loss'], dropout['loss'], rtol=1e-3)
    assert _rel(amp, plain) > 1e-5 and amp['params']['0.weight'].dtype == np.float32
    # bfloat16 rounds each micro-batch's weight gradient: the whole batch trains apart from micro-batches of 2
    assert _rel(jobs.train(amp='bfloat16', microbatch=None), amp) > 1e-5


def test_dropout_on_two_pipelines_of_two_stages_equals_one_process():
    """Each pipeline's micro-batches draw the masks of their items' places in the global batch."""
    ranks = launch(jobs.runs, 4, args=([('pp', (None, None, {'stages': 2, 'dropout': True}))],), timeout=TIMEOUT)
    reference = jobs.train(dropout=True)
    for result in ranks:
        assert _rel(result['pp'], reference) < 1e-10
        np.testing.assert_allclose(result['pp']['loss'], reference['loss'], rtol=1e-10)
