"""A signal sent to the process that called ``launch`` (a script or a notebook's kernel) is passed on to its ranks:
their run with a checkpoint stops after the same batch with its checkpoint, the caller raises what the run raised,
and the resumed job ends with the parameters and losses of the job never stopped. A Ctrl-C in the caller's
terminal (SIGINT to its process group) reaches each rank once, through the caller; a SIGTERM to the caller's whole
process group leaves the forkserver, and so the ranks, running until they stop gracefully.

The ranks report when they are in batch 4 (a file each) and wait there until the signal reaches them; the test
signals the caller once both have reported."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from flowpipe.parallel import launch

from . import caller_signal_jobs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures('default_dtype')]
TIMEOUT = 900     # a job's limit: only a hang reaches it, however loaded the machine
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='module')
def reference(tmp_path_factory, default_dtype):
    return launch(caller_signal_jobs.train, 2, args=(str(tmp_path_factory.mktemp('reference')),), timeout=TIMEOUT)


def _signalled(tmp_path, dtype, send):
    """Run the launching script, ``send(caller)`` once both ranks wait in batch 4; the caller's exit status, the
    exception it wrote, the ranks' process groups and the caller's."""
    ready, outcome = tmp_path / 'ready', tmp_path / 'outcome.txt'
    ready.mkdir()
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(filter(None, [ROOT, os.environ.get('PYTHONPATH')]))}
    command = [sys.executable, '-m', 'tests.parallel.caller_signal_jobs', str(tmp_path / 'ckpt'), str(ready),
               str(dtype).removeprefix('torch.'), str(outcome)]
    caller = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)    # a process group of its own
    try:
        reports = []
        while len(reports) < 2 and caller.poll() is None:       # the caller's launch ends it past its timeout
            time.sleep(0.05)
            reports = [name for name in os.listdir(ready) if not name.endswith('.part')]
        assert caller.poll() is None, 'the caller ended before both ranks reached batch 4'
        send(caller)
        code = caller.wait()
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()
    groups = [int((ready / name).read_text()) for name in sorted(reports)]
    return code, outcome.read_text() if outcome.exists() else '', groups, caller.pid


@pytest.mark.parametrize('name, to_group, code, raised', [
    ('SIGTERM', False, 128 + signal.SIGTERM, 'RunStopped: flowpipe: the run stopped on SIGTERM after writing its'),
    ('SIGUSR1', False, 128 + signal.SIGUSR1, 'RunStopped: flowpipe: the run stopped on SIGUSR1 after writing its'),
    ('SIGTERM', True, 128 + signal.SIGTERM, 'RunStopped: flowpipe: the run stopped on SIGTERM after writing its'),
    ('SIGINT', True, -signal.SIGINT, 'KeyboardInterrupt: flowpipe: the launched ranks stopped on Ctrl-C')],
    ids=['SIGTERM', 'SIGUSR1', 'SIGTERM-to-group', 'SIGINT-to-group'])
def test_a_signal_to_the_caller_stops_its_ranks_with_a_checkpoint_that_resumes_exactly(tmp_path, reference,
                                                                                        default_dtype, name, to_group,
                                                                                        code, raised):
    number = getattr(signal, name)
    send = (lambda caller: os.killpg(caller.pid, number)) if to_group else (lambda caller: caller.send_signal(number))
    status, outcome, groups, caller = _signalled(tmp_path, default_dtype, send)
    assert outcome.startswith(raised) and status == code
    assert caller not in groups and len(set(groups)) == 2      # not in the caller's group (its terminal's)
    folder = str(tmp_path / 'ckpt')
    assert sorted(os.listdir(folder)) == ['checkpoint-000000005.flowpipe']     # batches 0 to 4 done, on both ranks
    resumed = launch(caller_signal_jobs.train, 2, args=(folder,), timeout=TIMEOUT)
    for rank in range(2):
        assert resumed[rank]['loss'] == reference[rank]['loss']
        assert all(np.array_equal(got, want) for got, want in zip(resumed[rank]['params'], reference[rank]['params']))
    assert resumed[0]['files'] == ['checkpoint-000000012.flowpipe']
