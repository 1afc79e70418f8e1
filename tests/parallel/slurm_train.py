"""The training script of ``test_slurm.py``, which torchrun starts in the documented sbatch script (and ``launch``
for the uninterrupted reference): ``python slurm_train.py FOLDER OUT LOG DTYPE [--pause K]``.

Each rank trains ``signal_jobs``' pipeline (``dist_jobs``' network; two shuffled epochs of 12 batches, ``Checkpoint(FOLDER, every=100)``,
``resume=True``) under the default dtype DTYPE; rank 0 saves the parameters and losses to OUT when the run ends.
With ``--pause K``, the first start of the job (``SLURM_RESTART_COUNT`` unset or 0) waits in batch K (from 0)
until the rank receives SIGUSR1, which the test has Slurm send. Lines in LOG say what each start of each rank did.
"""
import os
import signal
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from flowpipe import B, Checkpoint, I, Pipeline, RunStopped, V  # noqa: E402
from flowpipe.parallel import distributed  # noqa: E402
from tests.parallel.dist_jobs import config, dataset  # noqa: E402

WAIT = 900     # the most seconds a paused rank waits for its signal: only a broken job waits that long
#: the batch to wait in, this start's number, the log (set in ``main``; outside the pipeline's definition)
RUN = {'pause': None, 'attempt': 0, 'log': None}


def log(message):
    with open(RUN['log'], 'a') as file:            # one short line per write: the ranks' lines do not mix
        file.write(f"attempt {RUN['attempt']} rank {distributed.rank()}: {message}\n")


def pause(number):
    """In batch ``RUN['pause']``: wait for SIGUSR1, passing it on to the handler flowpipe set for the run."""
    if number != RUN['pause']:
        return
    received = []
    previous = signal.getsignal(signal.SIGUSR1)

    def note(signum, frame):
        received.append(signum)
        log(f'received SIGUSR1 in batch {number}')
        if callable(previous):
            previous(signum, frame)
    signal.signal(signal.SIGUSR1, note)
    log(f'waits in batch {number}')
    deadline = time.monotonic() + WAIT
    while not received and time.monotonic() < deadline:
        time.sleep(0.1)
    signal.signal(signal.SIGUSR1, previous)


def main(folder, out, log_path, dtype, pause_at):
    torch.set_default_dtype(getattr(torch, dtype))
    RUN.update(pause=pause_at, attempt=int(os.environ.get('SLURM_RESTART_COUNT') or 0), log=log_path)
    if RUN['attempt']:
        RUN['pause'] = None
    pipeline = (Pipeline().init_variable('loss', []).init_model('net', config=config())
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))
                .call(pause, I('c'))) << dataset()
    log(f"starts with {sorted(os.listdir(folder)) if os.path.isdir(folder) else []}")
    try:
        pipeline.run(4, n_epochs=2, shuffle=True, seed=3, checkpoint=Checkpoint(folder, every=100), resume=True)
    except RunStopped as stop:
        log(f'stopped with exit status {stop.code} after {pipeline.state.batches} batches')
        raise
    log(f'finished after {pipeline.state.batches} batches')
    if distributed.rank() == 0:
        torch.save({'params': [p.detach().clone() for p in pipeline.m('net').model.parameters()],
                    'loss': list(pipeline.v('loss'))}, out)


if __name__ == '__main__':
    arguments = sys.argv[1:]
    at = int(arguments[arguments.index('--pause') + 1]) if '--pause' in arguments else None
    main(*arguments[:4], at)
