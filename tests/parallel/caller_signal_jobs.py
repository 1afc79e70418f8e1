"""Jobs for ``test_caller_signals.py``: a training run with a checkpoint whose ranks, in batch ``at``, report that
they are there (a file each, holding the rank's process group) and wait until a stop signal reaches them, passed
on by the process that launched them; and the script that launches it (``python caller_signal_jobs.py``)."""
import os
import signal
import sys
import time

from flowpipe import B, Checkpoint, I, Pipeline, V
from flowpipe.parallel import distributed

from .dist_jobs import config, dataset

#: the batch the ranks wait in and the folder of their reports (outside the pipeline's definition)
HOLD = {'at': None, 'folder': None}


def _hold(number):
    if number != HOLD['at']:
        return
    noted = signal.getsignal(signal.SIGTERM).__self__.received      # the run's graceful stop notes the signals
    name = os.path.join(HOLD['folder'], f'rank-{distributed.rank()}')
    with open(name + '.part', 'w', encoding='ascii') as file:
        file.write(str(os.getpgid(0)))
    os.replace(name + '.part', name)
    while not noted:
        time.sleep(0.01)


def train(folder, at=None, ready=None):
    """Two shuffled epochs of 12 batches with ``Checkpoint(folder, every=100)``, resumed from it; in batch ``at``
    every rank reports in ``ready`` and waits for a stop signal. The parameters, the losses and (rank 0) the
    checkpoint files."""
    HOLD.update(at=at, folder=ready)
    pipeline = (Pipeline().init_variable('loss', []).init_model('net', config=config())
                .call(_hold, I('c'))
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dataset()
    pipeline.run(4, n_epochs=2, shuffle=True, seed=3, checkpoint=Checkpoint(folder, every=100), resume=True)
    model = pipeline.m('net')
    files = sorted(os.listdir(folder)) if distributed.rank() == 0 else None
    return {'params': [p.detach().numpy().copy() for p in model.model.parameters()], 'loss': list(pipeline.v('loss')),
            'files': files}


def main(folder, ready, dtype, outcome):
    """Launch ``train`` on 2 ranks held in batch 4 under torch's default ``dtype``; the exception it raises is
    written to ``outcome`` (its type and message) and raised again."""
    import torch

    from flowpipe.parallel import launch
    torch.set_default_dtype(getattr(torch, dtype))
    try:
        launch(train, 2, args=(folder, 4, ready), timeout=900)
    except BaseException as error:
        with open(outcome, 'w', encoding='utf-8') as file:
            file.write(f'{type(error).__name__}: {error}')
        raise


if __name__ == '__main__':
    from tests.parallel import caller_signal_jobs      # the ranks import the function from its module
    caller_signal_jobs.main(*sys.argv[1:5])
