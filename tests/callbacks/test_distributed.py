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
    ranks = launch(dist_jobs.train_with_callbacks, 2, args=(str(tmp_path / 'job'),), timeout=240)
    assert alone['stop'] is not None and alone['stop'] < 29
    for result in ranks:
        assert result['stop'] == alone['stop'] and result['lrs'] == alone['lrs']
        assert result['files'] == alone['files'] and len(result['files']) == 2
        assert os.path.basename(result['best'][0]) == os.path.basename(alone['best'][0])
        assert len(result['rows']) == len(alone['rows'])
        # every rank validated on the whole set: per-item metrics are one process's, not a shard's
        assert result['validated']['val/items'] == dist_jobs.dist_jobs.N_ITEMS
        assert result['validated']['val/accuracy'] == alone['validated']['val/accuracy']
        assert result['validated']['val/loss'] == pytest.approx(alone['validated']['val/loss'], rel=1e-10)
        for got, expected in zip(result['rows'], alone['rows']):
            assert got['val/loss'] == pytest.approx(expected['val/loss'], rel=1e-10)
        for got, expected in zip(result['params'], alone['params']):
            np.testing.assert_allclose(got, expected, rtol=1e-9)
    assert [result['wrote'] for result in ranks] == [True, False]
