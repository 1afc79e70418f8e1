"""Sharded models under ``torchrun --max-restarts=1`` with checkpoints: a rank killed mid-run restarts the job, which
goes on from the newest checkpoint (the whole state gathered into the file, or one shard per rank beside it) and
ends with the parameters, losses, learning rates and best checkpoint of the job that was never interrupted."""
import os

import numpy as np
import pytest

from .test_torchrun_resume import _job

pytestmark = pytest.mark.slow


@pytest.mark.parametrize('sharded_checkpoint', ['0', '1'])
def test_a_killed_rank_of_a_sharded_job_resumes_to_the_uninterrupted_end(tmp_path, sharded_checkpoint):
    env = {'SHARDING': 'full', 'SHARDED_CHECKPOINT': sharded_checkpoint}
    reference, _ = _job(tmp_path / 'reference', tmp_path / 'reference-out', **env)
    resumed, log = _job(tmp_path / 'killed', tmp_path / 'killed-out', KILL_RANK=1, KILL_AT=6, **env)
    assert [result['attempt'] for result in resumed] == ['1', '1'], log[-3000:]     # the job did restart
    shards = [name for name in os.listdir(tmp_path / 'killed') if name.endswith('.shards')]
    assert len(shards) == (1 if sharded_checkpoint == '1' else 0)
    for folder in (tmp_path / 'reference-out', tmp_path / 'killed-out'):
        assert sorted(os.listdir(folder / 'best')) == ['.modelcheckpoint.json', 'epoch-0001.model',
                                                       'epoch-0002.model']
    for rank in range(2):
        assert resumed[rank]['lrs'] == reference[rank]['lrs'] and resumed[rank]['best'] == reference[rank]['best']
        assert resumed[rank]['loss'] == reference[rank]['loss']
        for got, want in zip(resumed[rank]['params'], reference[rank]['params']):
            assert np.array_equal(got, want)
