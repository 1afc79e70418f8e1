"""The sbatch script of ``docs/distributed.md`` under a real Slurm: a one-node cluster on this machine
(``scripts/slurm_local.sh``; CI's, when ``SLURM_CONF`` names one), the documented script with a small job in it.

Slurm sends SIGUSR1 to the batch script (``scancel --signal=USR1 --batch``: what ``--signal=B:USR1@120`` sends
120 s before the time limit, sent by the test once every rank is inside a batch, so that no timing decides), the
script passes it on through srun and torchrun to the 2 ranks, which write the checkpoint, rank 0 runs
``scontrol requeue``, Slurm starts the job again, and that start resumes and ends with the parameters and losses
of the run never stopped, bit for bit. Skipped where Slurm is not installed."""
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from flowpipe.parallel import launch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, 'tests', 'parallel', 'slurm_train.py')
SCRIPT = os.path.join(ROOT, 'scripts', 'slurm_local.sh')
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
LIMIT = 900       # seconds for each thing the test waits for: only a broken job reaches it, however loaded the machine
PAUSE = 4         # the batch the first start waits in for the signal
BATCHES = 12      # the run's batches: 2 epochs of 23 items in batches of 4


@pytest.fixture(scope='module')
def slurm_conf(tmp_path_factory):
    """The ``SLURM_CONF`` of a running cluster: the one ``SLURM_CONF`` names, or one started here (as root)."""
    if shutil.which('sbatch') is None:
        pytest.skip('Slurm is not installed (no sbatch on PATH): bash scripts/slurm_local.sh install')
    if os.environ.get('SLURM_CONF'):
        yield os.environ['SLURM_CONF']
        return
    if os.geteuid() != 0 or not all(shutil.which(name) for name in ('slurmctld', 'slurmd', 'munged')):
        pytest.skip('no Slurm cluster: SLURM_CONF is not set, and starting one needs root and slurmctld, slurmd, '
                    'munged (bash scripts/slurm_local.sh start DIR)')
    folder = str(tmp_path_factory.mktemp('slurm'))
    subprocess.run(['bash', SCRIPT, 'start', folder], check=True)
    try:
        yield os.path.join(folder, 'slurm.conf')
    finally:
        subprocess.run(['bash', SCRIPT, 'stop', folder], check=False)


def _free_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def documented_script(folder, arguments):
    """The sbatch script of docs/distributed.md for one node of this machine: 2 ranks on its CPUs, no GPU, a port
    of its own, the output in ``folder``, ``slurm_train.py`` with ``arguments`` for train.py; the rest as written."""
    with open(os.path.join(ROOT, 'docs', 'distributed.md')) as file:
        script = next(block for block in re.findall(r'```bash\n(.*?)```', file.read(), re.S)
                      if '#SBATCH --requeue' in block)
    changes = [('#SBATCH --nodes=2\n', '#SBATCH --nodes=1\n'), ('#SBATCH --gpus-per-node=4\n', ''),
               ('#SBATCH --cpus-per-task=32\n', '#SBATCH --cpus-per-task=1\n'),
               # a limit whose warning (120 s before it) comes after the test's: Slurm's timer decides nothing here
               ('#SBATCH --time=04:00:00\n', '#SBATCH --time=30\n'),
               ('--output=train-%j.out', f'--output={folder}/train-%j.out'),
               ('--nproc_per_node=4', '--nproc_per_node=2'), ('"$HEAD:29500"', f'"$HEAD:{_free_port()}"'),
               (' train.py &', f" {TRAIN} {' '.join(arguments)} &")]
    for old, new in changes:
        assert script.count(old) == 1, f'docs/distributed.md\'s sbatch script changed: {old!r} is not in it once'
        script = script.replace(old, new)
    return script


def _job(job, conf):
    """``scontrol show job``'s fields of ``job``."""
    shown = subprocess.run(['scontrol', 'show', 'job', job], capture_output=True, text=True, check=True,
                           env={**os.environ, 'SLURM_CONF': conf}).stdout
    return dict(re.findall(r'(\w+)=(\S*)', shown))


def _wait(what, ready, job, conf, folder):
    """Poll until ``ready()``; fails naming ``what`` when the job ended first or ``LIMIT`` passed."""
    deadline = time.monotonic() + LIMIT
    while True:
        state = _job(job, conf)['JobState']       # read before ready(): a job that ended had its last say
        if ready():
            return
        if state in ('FAILED', 'CANCELLED', 'TIMEOUT', 'NODE_FAIL', 'OUT_OF_MEMORY', 'COMPLETED') or (
                time.monotonic() > deadline):
            outputs = ''.join(open(os.path.join(folder, name)).read() for name in sorted(os.listdir(folder))
                              if name.startswith('train-') or name == 'log')
            pytest.fail(f'Expected {what}. Received: job {job} {state} (limit {LIMIT} s). Its output:\n{outputs}')
        time.sleep(0.5)


def _said(path, attempt, rank):
    """What rank ``rank`` logged in start ``attempt`` of the job (0: the first)."""
    with open(path) as file:
        return [line.split(': ', 1)[1].strip() for line in file if line.startswith(f'attempt {attempt} rank {rank}:')]


def test_the_documented_sbatch_script_requeues_on_slurms_warning_and_ends_as_if_never_stopped(
        tmp_path, slurm_conf, default_dtype):
    dtype = str(default_dtype).removeprefix('torch.')
    launch(TRAIN, 2, args=(str(tmp_path / 'alone'), str(tmp_path / 'alone.pt'), str(tmp_path / 'alone.log'), dtype),
           timeout=LIMIT)
    reference = torch.load(tmp_path / 'alone.pt')
    folder, log = str(tmp_path), str(tmp_path / 'log')
    arguments = (str(tmp_path / 'checkpoints'), str(tmp_path / 'out.pt'), log, dtype, '--pause', str(PAUSE))
    (tmp_path / 'job.sh').write_text(documented_script(folder, arguments))
    bin_folder = os.path.dirname(sys.executable)             # torchrun beside the interpreter
    env = {**os.environ, 'SLURM_CONF': slurm_conf, 'PATH': f"{bin_folder}:{os.environ['PATH']}",
           'PYTHONPATH': os.pathsep.join(filter(None, (ROOT, os.environ.get('PYTHONPATH')))),
           'GLOO_SOCKET_IFNAME': 'lo'}
    job = subprocess.run(['sbatch', '--parsable', str(tmp_path / 'job.sh')], capture_output=True, text=True,
                         check=True, cwd=folder, env=env).stdout.strip().split(';')[0]

    def waiting():
        return os.path.exists(log) and all(f'waits in batch {PAUSE}' in _said(log, 0, rank) for rank in (0, 1))
    _wait(f'both ranks waiting in batch {PAUSE}', waiting, job, slurm_conf, folder)
    subprocess.run(['scancel', '--signal=USR1', '--batch', job], check=True, env=env)
    _wait('the job requeued and completed', lambda: _job(job, slurm_conf)['JobState'] == 'COMPLETED' and
          os.path.exists(tmp_path / 'out.pt'), job, slurm_conf, folder)

    assert _job(job, slurm_conf)['Restarts'] == '1'                # rank 0's scontrol requeue, and Slurm's restart
    started = set()
    for rank in (0, 1):
        # through srun and torchrun (srun signals every process of the step, torchrun its workers once more)
        assert f'received SIGUSR1 in batch {PAUSE}' in _said(log, 0, rank)
        second = _said(log, 1, rank)
        assert second[-1] == f'finished after {BATCHES} batches' and not _said(log, 2, rank)
        started.add(second[0])
    checkpoint = re.fullmatch(r"starts with \['checkpoint-(\d+)\.flowpipe'\]", started.pop())
    assert not started and checkpoint
    # the signal came after batch 4's training step: the ranks agree on it in batch 5's, and stop after batch 5
    assert int(checkpoint.group(1)) == PAUSE + 2
    result = torch.load(tmp_path / 'out.pt')
    assert result['loss'] == reference['loss']
    assert all(np.array_equal(got.numpy(), want.numpy()) for got, want in zip(result['params'], reference['params']))
