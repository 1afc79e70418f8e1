"""Under ``torchrun --max-restarts`` with checkpoints, a rank killed mid-run restarts the job, which goes on from
the newest checkpoint and ends with the parameters, losses and batches of the job that was never interrupted.

The job may restart twice: on a loaded machine gloo sometimes fails to connect the restarted ranks, and one more
restart (the rank is killed in the first attempt only) then gets through."""
import os
import subprocess
import sys

import dill
import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'tests', 'parallel', 'torchrun_resume_script.py')
TIMEOUT = 300


def _job(folder, out, **kill):
    os.makedirs(out)
    env = {**os.environ, 'PYTHONPATH': ROOT, 'GLOO_SOCKET_IFNAME': 'lo', 'FLOWPIPE_DIST_TIMEOUT': '60',
           **{key: str(value) for key, value in kill.items()}}
    command = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
               '--max-restarts=2', SCRIPT, str(folder), str(out)]
    done = subprocess.run(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-3000:]
    results = []
    for rank in range(2):
        with open(os.path.join(out, f'rank{rank}.pkl'), 'rb') as file:
            results.append(dill.load(file))
    return results, done.stdout


@pytest.mark.slow
def test_a_killed_rank_restarts_the_job_which_ends_as_the_uninterrupted_one(tmp_path):
    reference, _ = _job(tmp_path / 'reference', tmp_path / 'reference-out')
    resumed, log = _job(tmp_path / 'killed', tmp_path / 'killed-out', KILL_RANK=1, KILL_AT=6)
    assert all(result['attempt'] != '0' for result in resumed), log[-3000:]     # the job did restart
    for rank in range(2):
        assert resumed[rank]['loss'] == reference[rank]['loss']
        assert resumed[rank]['ids'] == reference[rank]['ids']
        for got, want in zip(resumed[rank]['params'], reference[rank]['params']):
            assert np.array_equal(got, want)
    assert all(np.array_equal(a, b) for a, b in zip(resumed[0]['params'], resumed[1]['params']))
