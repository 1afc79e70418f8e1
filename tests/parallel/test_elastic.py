"""Elastic torchrun: two agents (``--nnodes=1:2``, one process each, a c10d rendezvous on 127.0.0.1) train with a
checkpoint after every batch; one node goes away mid-run (its agent and its rank killed with ``SIGKILL``). The
surviving rank fails at once with an error naming the lost peer (no hang), its agent restarts it alone, and the
job resumes the newest checkpoint on 1 rank: it ends with the parameters, losses, learning rates, best checkpoint
and logged rows of the uninterrupted run (to float reordering, 1e-10 relative, as docs/parallel.md promises for
another world size), and rank 0 holds every item of the batches before the loss once, merged in rank order.

The node that hosts the rendezvous store (``is_host=1``) survives: with the c10d backend the job ends with it. Which
rank the lost node had follows the start order (the rendezvous numbers its nodes by process id): started after the
host, it is rank 1; before it, rank 0 (the rank that writes the checkpoints)."""
import csv
import os
import re
import socket
import subprocess
import sys

import dill
import numpy as np
import pytest

from . import torchrun_resume_script as script

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'tests', 'parallel', 'torchrun_resume_script.py')
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine
KILL_AT = 8


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _agent(endpoint, host, folder, out, dtype, lose=None):
    """One elastic torchrun agent of the job (``host``: it hosts the rendezvous store); ``lose``: the folder where
    its rank, lost, leaves its number."""
    env = {**os.environ, 'PYTHONPATH': ROOT, 'GLOO_SOCKET_IFNAME': 'lo', 'FLOWPIPE_DIST_TIMEOUT': '120',
           'TORCH_DISABLE_SHARE_RDZV_TCP_STORE': '1', 'DEFAULT_DTYPE': dtype, 'KILL_AT': str(KILL_AT),
           **({'LOSE_NODE': str(lose)} if lose else {})}
    command = [sys.executable, '-m', 'torch.distributed.run', '--nnodes=1:2', '--nproc_per_node=1',
               '--max-restarts=1', '--rdzv_backend=c10d', f'--rdzv_endpoint={endpoint}', '--rdzv_id=flowpipe-elastic',
               f'--rdzv_conf=is_host={int(host)}', SCRIPT, str(folder), str(out)]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _elastic_job(tmp_path, lost, dtype):
    """The job whose node with rank ``lost`` goes away at batch ``KILL_AT``: the survivor's log and the lost rank."""
    endpoint, folder, out, lose = f'127.0.0.1:{_free_port()}', tmp_path / 'ckpt', tmp_path / 'out', tmp_path / 'lost'
    out.mkdir()
    lose.mkdir()
    survivor = {'endpoint': endpoint, 'folder': folder, 'out': out, 'dtype': dtype}
    agents = {}
    for name in (['survivor', 'lost'] if lost == 1 else ['lost', 'survivor']):      # started first: rank 0
        agents[name] = _agent(host=name == 'survivor', lose=lose if name == 'lost' else None, **survivor)
    try:
        logs = {name: agent.communicate(timeout=TIMEOUT)[0] for name, agent in agents.items()}
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    assert agents['survivor'].returncode == 0, logs['survivor'][-4000:]
    assert agents['lost'].returncode == -9, logs['lost'][-4000:]
    assert os.listdir(lose) == [f'lost-rank{lost}']
    return logs['survivor']


def _rows(path):
    with open(path, newline='') as file:
        rows = list(csv.DictReader(file))
    return [{key: float(value) for key, value in row.items() if key != 'run'} for row in rows]


@pytest.fixture(scope='module')
def reference(tmp_path_factory, default_dtype):
    """The uninterrupted run in this process."""
    root = tmp_path_factory.mktemp('reference')
    return script.train(str(root / 'ckpt'), str(root / 'out')), root / 'out'


@pytest.mark.parametrize('lost', [1, 0])
def test_a_lost_node_restarts_the_job_on_fewer_ranks_which_ends_as_the_uninterrupted_run(tmp_path, reference, lost,
                                                                                          default_dtype):
    (want, want_out), dtype = reference, str(default_dtype).removeprefix('torch.')
    log = _elastic_job(tmp_path, lost, dtype)
    # the surviving rank failed in the batch's exchange, naming the lost peer, and did not wait for a timeout
    assert re.search(rf'Received: rank {1 - lost} lost a peer \(', log), log[-4000:]
    assert 'timed out' not in log
    resumed = re.search(r"resuming from '[^']*checkpoint-(\d+)\.flowpipe' with world_size: 2 → 1", log)
    assert resumed, log[-4000:]
    stop = int(resumed.group(1))
    assert KILL_AT - 1 <= stop <= KILL_AT
    with open(tmp_path / 'out' / 'rank0.pkl', 'rb') as file:
        got = dill.load(file)
    assert got['world'] == 1 and got['attempt'] == '1'
    assert max(float(np.max(np.abs(a - b)) / np.max(np.abs(b))) for a, b in zip(got['params'], want['params'])) < 1e-10
    np.testing.assert_allclose(got['loss'], want['loss'], rtol=1e-10)
    assert got['lrs'] == want['lrs'] == [0.05] and got['best'] == want['best']
    assert sorted(os.listdir(tmp_path / 'out' / 'best')) == sorted(os.listdir(want_out / 'best'))
    rows = [_rows(out / 'logs' / 'metrics.csv') for out in (tmp_path / 'out', want_out)]
    assert len(rows[0]) == len(rows[1]) == 3 and [list(row) for row in rows[0]] == [list(row) for row in rows[1]]
    for row, expected in zip(*rows):
        np.testing.assert_allclose(list(row.values()), list(expected.values()), rtol=1e-10)
    # the 2 ranks' items of the batches before the checkpoint, rank 0's then rank 1's; then the later batches whole
    ids = got['ids']
    assert len(ids) == 2 * stop + len(want['ids']) - stop
    for batch in range(stop):
        assert ids[batch] + ids[stop + batch] == want['ids'][batch]
    assert ids[2 * stop:] == want['ids'][stop:]
