"""Under ``torchrun --max-restarts`` with checkpoints, a rank killed mid-run restarts the job, which goes on from
the newest checkpoint and ends with the parameters, losses, batches, learning rates, best checkpoint and logged
rows of the job that was never interrupted.

``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: torchrun otherwise keeps one key-value store across restarts, where the
restarted ranks may read the address a killed rank published and fail to connect (see docs/distributed.md)."""
import csv
import os
import subprocess
import sys

import dill
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'tests', 'parallel', 'torchrun_resume_script.py')
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


def _job(folder, out, **kill):
    os.makedirs(out)
    env = {**os.environ, 'PYTHONPATH': ROOT, 'GLOO_SOCKET_IFNAME': 'lo', 'FLOWPIPE_DIST_TIMEOUT': '60',
           'TORCH_DISABLE_SHARE_RDZV_TCP_STORE': '1',
           **{key: str(value) for key, value in kill.items()}}
    command = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
               '--max-restarts=1', SCRIPT, str(folder), str(out)]
    done = subprocess.run(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-3000:]
    results = []
    for rank in range(2):
        with open(os.path.join(out, f'rank{rank}.pkl'), 'rb') as file:
            results.append(dill.load(file))
    return results, done.stdout


def _rows(path):
    """The rows of a CSVLogger file, all of one run, without the run's mark."""
    with open(path, newline='') as file:
        rows = list(csv.DictReader(file))
    assert len({row.pop('run') for row in rows}) == 1
    return rows


@pytest.mark.slow
def test_a_killed_rank_restarts_the_job_which_ends_as_the_uninterrupted_one(tmp_path):
    reference, _ = _job(tmp_path / 'reference', tmp_path / 'reference-out')
    resumed, log = _job(tmp_path / 'killed', tmp_path / 'killed-out', KILL_RANK=1, KILL_AT=6)
    assert [result['attempt'] for result in resumed] == ['1', '1'], log[-3000:]     # the job did restart
    for folder in (tmp_path / 'reference-out', tmp_path / 'killed-out'):      # rank 0 alone writes files
        assert sorted(os.listdir(folder / 'best')) == ['.modelcheckpoint.json', 'epoch-0001.model',
                                                       'epoch-0002.model']
    rows = [_rows(tmp_path / out / 'logs' / 'metrics.csv') for out in ('reference-out', 'killed-out')]
    assert rows[0] == rows[1] and len(rows[0]) == 3        # 3 epochs, of one run: the restarted job's own rows
    assert reference[0]['lrs'] == [0.05]                   # the plateau rule halved the rate once
    for rank in range(2):
        assert resumed[rank]['lrs'] == reference[rank]['lrs'] and resumed[rank]['best'] == reference[rank]['best']
        assert resumed[rank]['loss'] == reference[rank]['loss']
        assert resumed[rank]['ids'] == reference[rank]['ids']
        for got, want in zip(resumed[rank]['params'], reference[rank]['params']):
            assert np.array_equal(got, want)
    assert all(np.array_equal(a, b) for a, b in zip(resumed[0]['params'], resumed[1]['params']))
