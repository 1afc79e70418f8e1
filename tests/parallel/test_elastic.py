"""Elastic torchrun: two agents (``--nnodes=1:2``, a c10d rendezvous on 127.0.0.1) train with a checkpoint after
every batch; one node goes away mid-run (its agent and its ranks killed with ``SIGKILL``). The surviving ranks fail
at once with an error naming the lost peer (no hang), their agent restarts them alone, and the job resumes the
newest checkpoint on the ranks left: 2 ranks on 1, or 4 on 2. It ends with the parameters, losses, learning rates,
best checkpoint and logged rows of the uninterrupted run (to float reordering, 1e-10 relative, as docs/parallel.md
promises for another world size); rank 0 holds every item of the batches before the loss once, merged in rank
order, and the ranks share the later batches. A node joining a job of one: the rank stops gracefully after the
batch in flight (torchrun's SIGTERM) and the job goes on, on 2 ranks, to the same end.

The node that hosts the rendezvous store (``is_host=1``) survives: with the c10d backend the job ends with it (a
test loses it: the other node's rank names the lost peer, and its agent ends at once with an error). Which ranks
the lost node had follows the start order (the rendezvous numbers its nodes by process id): started after the
host, the last ones; before it, the first ones, rank 0 (which writes the checkpoints) among them."""
import csv
import os
import re
import socket
import subprocess
import sys
import time

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


def _agent(endpoint, host, nproc, folder, out, dtype, **env):
    """One elastic torchrun agent of the job with ``nproc`` ranks (``host``: it hosts the rendezvous store), ``env``
    in its environment (``LOSE_NODE``, ``HOLD``, ``WAIT_NODES``: see torchrun_resume_script.py)."""
    env = {**os.environ, 'PYTHONPATH': ROOT, 'GLOO_SOCKET_IFNAME': 'lo', 'FLOWPIPE_DIST_TIMEOUT': '120',
           'TORCH_DISABLE_SHARE_RDZV_TCP_STORE': '1', 'DEFAULT_DTYPE': dtype, 'KILL_AT': str(KILL_AT),
           **{key: str(value) for key, value in env.items()}}
    command = [sys.executable, '-m', 'torch.distributed.run', '--nnodes=1:2', f'--nproc_per_node={nproc}',
               '--max-restarts=1', '--rdzv_backend=c10d', f'--rdzv_endpoint={endpoint}', '--rdzv_id=flowpipe-elastic',
               f'--rdzv_conf=is_host={int(host)}', SCRIPT, str(folder), str(out)]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _common(tmp_path, nproc, dtype):
    """The arguments every agent of one job shares."""
    return {'endpoint': f'127.0.0.1:{_free_port()}', 'nproc': nproc, 'folder': tmp_path / 'ckpt',
            'out': tmp_path / 'out', 'dtype': dtype}


def _wait(agents):
    """Each agent's output once they all ended (killed past ``TIMEOUT``: a hang)."""
    try:
        return {name: agent.communicate(timeout=TIMEOUT)[0] for name, agent in agents.items()}
    finally:
        for agent in agents.values():
            if agent.poll() is None:
                agent.kill()
                agent.wait()


def _run(tmp_path, nproc, dtype, order, host):
    """Start the agents named in ``order`` (started first: ranks 0...; ``host``: the one hosting the rendezvous;
    ``'lost'``: the one whose node goes away at batch ``KILL_AT``) and wait for them: ``(agents, logs)``. A job that
    formed with one node, the other late, waits for it before its first batch."""
    for name in ('out', 'lost'):
        (tmp_path / name).mkdir()
    common = _common(tmp_path, nproc, dtype)
    agents = {name: _agent(host=name == host, WAIT_NODES=2, **({'LOSE_NODE': tmp_path / 'lost'} if name == 'lost'
                                                                else {}), **common) for name in order}
    return agents, _wait(agents)


def _elastic_job(tmp_path, nproc, lost_first, dtype):
    """The job of 2 nodes of ``nproc`` ranks whose node started first (``lost_first``) or second goes away at batch
    ``KILL_AT``: the survivors' log and ranks."""
    order = ['lost', 'survivor'] if lost_first else ['survivor', 'lost']
    agents, logs = _run(tmp_path, nproc, dtype, order, host='survivor')
    assert agents['survivor'].returncode == 0, logs['survivor'][-4000:]
    assert agents['lost'].returncode == -9, logs['lost'][-4000:]
    lost = list(range(nproc)) if lost_first else list(range(nproc, 2 * nproc))
    assert sorted(os.listdir(tmp_path / 'lost')) == [f'lost-rank{rank}' for rank in lost]
    return logs['survivor'], [rank for rank in range(2 * nproc) if rank not in lost]


def _rows(path):
    with open(path, newline='') as file:
        rows = list(csv.DictReader(file))
    return [{key: float(value) for key, value in row.items() if key != 'run'} for row in rows]


@pytest.fixture(scope='module')
def reference(tmp_path_factory, default_dtype):
    """The uninterrupted run in this process."""
    root = tmp_path_factory.mktemp('reference')
    return script.train(str(root / 'ckpt'), str(root / 'out')), root / 'out'


def _results(out, reference, nproc):
    """The ranks' final states in ``out``, checked against the uninterrupted run: ``nproc`` ranks, and its
    parameters, losses, learning rates, best checkpoint and logged rows."""
    want, want_out = reference
    got = []
    for rank in range(nproc):
        with open(out / f'rank{rank}.pkl', 'rb') as file:
            got.append(dill.load(file))
    for result in got:
        assert result['world'] == nproc
        assert max(float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
                   for a, b in zip(result['params'], want['params'])) < 1e-10
        np.testing.assert_allclose(result['loss'], want['loss'], rtol=1e-10)
        assert result['lrs'] == want['lrs'] == [0.05] and result['best'] == want['best']
    assert sorted(os.listdir(out / 'best')) == sorted(os.listdir(want_out / 'best'))
    rows = [_rows(folder / 'logs' / 'metrics.csv') for folder in (out, want_out)]
    assert len(rows[0]) == len(rows[1]) == 3 and [list(row) for row in rows[0]] == [list(row) for row in rows[1]]
    for row, expected in zip(*rows):
        np.testing.assert_allclose(list(row.values()), list(expected.values()), rtol=1e-10)
    return got


@pytest.mark.parametrize('nproc, lost_first', [(1, False), (2, True)], ids=['2-ranks-to-1', '4-ranks-to-2'])
def test_a_lost_node_restarts_the_job_on_fewer_ranks_which_ends_as_the_uninterrupted_run(tmp_path, reference, nproc,
                                                                                          lost_first, default_dtype):
    want, dtype = reference[0], str(default_dtype).removeprefix('torch.')
    log, survivors = _elastic_job(tmp_path, nproc, lost_first, dtype)
    # the surviving ranks failed in the batch's exchange, naming the lost peer, and did not wait for a timeout
    for rank in survivors:
        assert re.search(rf'Received: rank {rank} lost a peer \(', log), log[-4000:]
    assert 'timed out' not in log
    resumed = re.search(rf"resuming from '[^']*checkpoint-(\d+)\.flowpipe' with world_size: {2 * nproc} → {nproc}",
                        log)
    assert resumed, log[-4000:]
    stop = int(resumed.group(1))
    assert KILL_AT - 1 <= stop <= KILL_AT
    got = _results(tmp_path / 'out', reference, nproc)
    assert all(result['attempt'] == '1' for result in got)
    # rank 0: the old ranks' items of the batches before the checkpoint, in rank order; then every rank its share of
    # each later batch
    before, later = 2 * nproc * stop, len(want['ids']) - stop
    assert len(got[0]['ids']) == before + later and all(len(result['ids']) == later for result in got[1:])
    for batch in range(stop):
        assert sum((got[0]['ids'][rank * stop + batch] for rank in range(2 * nproc)), []) == want['ids'][batch]
    shares = [got[0]['ids'][before:]] + [result['ids'] for result in got[1:]]
    assert [sum(parts, []) for parts in zip(*shares)] == want['ids'][stop:]


def test_losing_the_node_that_hosts_the_rendezvous_ends_the_other_node_with_an_error(tmp_path, default_dtype):
    dtype = str(default_dtype).removeprefix('torch.')
    agents, logs = _run(tmp_path, 1, dtype, ['lost', 'other'], host='lost')
    assert os.listdir(tmp_path / 'lost') == ['lost-rank0'] and agents['lost'].returncode == -9
    log = logs['other']
    assert agents['other'].returncode == 1, log[-4000:]
    assert re.search(r'Received: rank 1 lost a peer \(', log), log[-4000:]        # its rank named the loss
    assert 'RendezvousConnectionError: The connection to the C10d store has failed' in log
    assert not [name for name in os.listdir(tmp_path / 'out') if name.endswith('.pkl')]       # no rank finished


def test_a_node_joining_a_running_job_restarts_it_on_more_ranks_from_the_batch_in_flight(tmp_path, reference,
                                                                                        default_dtype):
    """A job formed with one node, its rank held at batch ``KILL_AT`` (``HOLD``); a second node joins. torchrun's
    agent sends SIGTERM to its rank: the run finishes that batch, writes its checkpoint and stops, and the job of 2
    nodes resumes it on 2 ranks."""
    (tmp_path / 'out').mkdir()
    common, held = _common(tmp_path, 1, str(default_dtype).removeprefix('torch.')), tmp_path / 'held'
    agents = {'first': _agent(host=True, HOLD=held, **common)}
    deadline = time.monotonic() + TIMEOUT
    while not held.exists() and agents['first'].poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert held.exists(), 'the first node\'s rank never reached the batch it is held at'
    agents['joining'] = _agent(host=False, **common)
    logs = _wait(agents)
    assert [agent.returncode for agent in agents.values()] == [0, 0], logs['first'][-4000:]
    assert f"resuming from '{tmp_path / 'ckpt'}/checkpoint-{KILL_AT + 1:09d}.flowpipe' with world_size: 1 → 2" in \
        logs['first'], logs['first'][-4000:]
    got = _results(tmp_path / 'out', reference, 2)
    # a one-process checkpoint's lists are every rank's; then each rank its share of the later batches
    ids, stop = reference[0]['ids'], KILL_AT + 1
    assert all(result['ids'][:stop] == ids[:stop] for result in got)
    assert [first + second for first, second in zip(got[0]['ids'][stop:], got[1]['ids'][stop:])] == ids[stop:]
