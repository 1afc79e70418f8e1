"""The unchanged training script under the real ``torchrun``: one node of 2 processes, and two single-process
"nodes" on localhost joined by a c10d rendezvous at 127.0.0.1; both equal one process on the whole batch."""
import os
import socket
import subprocess
import sys

import dill
import numpy as np
import pytest

from . import dist_jobs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, 'tests', 'parallel', 'torchrun_script.py')
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine


def _torchrun(*options, out):
    env = {**os.environ, 'PYTHONPATH': ROOT, 'GLOO_SOCKET_IFNAME': 'lo', 'FLOWPIPE_DIST_TIMEOUT': '120'}
    command = [sys.executable, '-m', 'torch.distributed.run', *options, SCRIPT, str(out)]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(processes):
    try:
        outputs = [process.communicate(timeout=TIMEOUT)[0] for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]


def _check(out, world):
    reference = dist_jobs.scenarios([('whole', {'batch_size': 7}),
                                     ('microbatch', {'batch_size': 5, 'microbatch': 2})])
    for rank in range(world):
        with open(out / f'rank{rank}.pkl', 'rb') as file:
            result = dill.load(file)
        for name, expected in reference.items():
            assert result[name]['world'] == world and result[name]['rank'] == rank
            for got, want in zip(result[name]['params'], expected['params']):
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
            sizes = [len(ids) for ids in result[name]['ids']]
            assert sizes == [len(ids) // world + (rank < len(ids) % world) for ids in expected['ids']]


@pytest.mark.slow
def test_torchrun_standalone_with_two_processes(tmp_path):
    _finish([_torchrun('--standalone', '--nproc_per_node=2', out=tmp_path)])
    _check(tmp_path, 2)


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_two_torchrun_nodes_on_localhost_with_a_c10d_rendezvous(tmp_path):
    endpoint = f'127.0.0.1:{_free_port()}'
    common = ('--nnodes=2', '--nproc_per_node=1', '--rdzv_backend=c10d', f'--rdzv_endpoint={endpoint}',
              '--rdzv_id=flowpipe-test', '--master_addr=127.0.0.1')
    _finish([_torchrun(*common, f'--node_rank={node}', out=tmp_path) for node in (0, 1)])
    _check(tmp_path, 2)
