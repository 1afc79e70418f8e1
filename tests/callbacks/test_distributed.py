"""Callbacks in a distributed job of 2 gloo processes: the same stop epoch, learning rates and parameters as one
process, and files from rank 0 only."""
import os

import numpy as np
import pytest

from flowpipe.parallel import launch

from . import dist_jobs

pytestmark = pytest.mark.slow          # several processes: in CI or with FLOWPIPE_SLOW=1


def test_two_processes_stop_where_one_process_stops(tmp_path):
    alone = dist_jobs.train_with_callbacks(str(tmp_path / 'alone'))
    ranks = launch(dist_jobs.train_with_callbacks, 2, args=(str(tmp_path / 'job'),), timeout=900)
    assert alone['stop'] is not None and alone['stop'] < 29
    for result in ranks:
        assert result['stop'] == alone['stop'] and result['lrs'] == alone['lrs']
        assert result['files'] == alone['files'] and len(result['files']) == 2
        assert os.path.basename(result['best'][0]) == os.path.basename(alone['best'][0])
        assert len(result['rows']) == len(alone['rows'])
        # the metrics are the whole set's, one process's, not a shard's
        assert result['validated']['val/items'] == dist_jobs.dist_jobs.N_ITEMS
        assert result['validated']['val/accuracy'] == alone['validated']['val/accuracy']
        assert result['validated']['val/loss'] == pytest.approx(alone['validated']['val/loss'], rel=1e-10)
        for got, expected in zip(result['rows'], alone['rows']):
            assert got['val/loss'] == pytest.approx(expected['val/loss'], rel=1e-10)
        for got, expected in zip(result['params'], alone['params']):
            np.testing.assert_allclose(got, expected, rtol=1e-9)
    assert [result['wrote'] for result in ranks] == [True, False]

    # validation was sharded: each of the 3 batches of a validation ran on one rank, rank 0 taking the first two
    # (recorded by a call action, which prefetch runs in finish order: compared as sorted lists)
    validations, batches = len(alone['rows']), [list(range(0, 8)), list(range(8, 16)), list(range(16, 23))]
    assert sorted(alone['validated_batches']) == sorted(batches * validations)
    assert sorted(ranks[0]['validated_batches']) == sorted(batches[:2] * validations)
    assert sorted(ranks[1]['validated_batches']) == batches[2:] * validations
    # each batch kept its number in the run: I('c') and the random draws are one process's
    assert alone['numbers'] == [0, 1, 2] and len(set(alone['draws'])) == 3
    for result in ranks:
        assert result['numbers'] == alone['numbers'] and result['draws'] == alone['draws']


def test_a_sharded_validation_refuses_a_variable_that_is_not_a_list_and_shard_false_computes_it():
    alone = dist_jobs.validate_a_sum(shard=True)
    sharded = launch(dist_jobs.validate_a_sum, 2, args=(True,), timeout=900)
    whole = launch(dist_jobs.validate_a_sum, 2, args=(False,), timeout=900)
    assert isinstance(alone, dict) and 0 < alone['val/correct'] <= dist_jobs.dist_jobs.N_ITEMS
    for message in sharded:         # every rank raises, none waits for the others
        assert "variable 'correct' changed otherwise" in message and 'shard=False' in message
    assert whole == [alone, alone]
