"""Run by ``torchrun --max-restarts=1`` in the tests: trains with a checkpoint after every batch, resuming from the
newest one, with callbacks (a sharded validation each epoch, plateau learning rates, the best checkpoint, a CSV
log), and writes each rank's final state.

Usage: ``torchrun ... tests/parallel/torchrun_resume_script.py CHECKPOINTS OUT_DIR`` (the repository root on
``PYTHONPATH``). With ``KILL_RANK`` and ``KILL_AT`` set, that rank kills itself with ``SIGKILL`` at that batch in the
job's first attempt (``TORCHELASTIC_RESTART_COUNT`` 0); torchrun then restarts every rank. ``SHARDING`` (``'full'``,
``'grad_op'``) shards the model; ``SHARDED_CHECKPOINT=1`` writes the checkpoints one shard per rank;
``DEFAULT_DTYPE`` (``'float32'``, ``'float64'``) is torch's default dtype.
"""
import os
import signal
import sys
import time

import dill
import numpy as np

from flowpipe import B, Checkpoint, I, Pipeline, V
from flowpipe.callbacks import CSVLogger, ModelCheckpoint, ReduceLROnPlateau, Validate
from flowpipe.parallel import distributed
from tests.parallel import dist_jobs


def die(number):
    """SIGKILL this process at the batch ``KILL_AT`` says, in the rank ``KILL_RANK`` says, on the first attempt. With
    ``LOSE_NODE`` (a folder) in its agent's environment, in a job of 2 nodes, this node goes away instead: each of
    its ranks leaves ``lost-rank<R>`` in that folder and, once all of them have, kills itself, local rank 0 its agent
    (its parent) first. With ``HOLD`` (a file) in a job of one node, the rank waits at that batch (``hold``); with
    ``WAIT_NODES``, a job formed with fewer nodes waits at its first batch for the others (``wait_for_nodes``)."""
    if os.environ.get('TORCHELASTIC_RESTART_COUNT', '0') != '0':
        return
    nodes = int(os.environ.get('GROUP_WORLD_SIZE', '1'))
    if number == 0 and nodes < int(os.environ.get('WAIT_NODES', '0')):
        wait_for_nodes()
    if str(number) != os.environ.get('KILL_AT'):
        return
    if os.environ.get('HOLD') and nodes == 1:
        hold(os.environ['HOLD'])
    if os.environ.get('LOSE_NODE') and nodes == 2:
        folder = os.environ['LOSE_NODE']
        open(os.path.join(folder, f'lost-rank{distributed.rank()}'), 'w').close()
        while len(os.listdir(folder)) < int(os.environ['LOCAL_WORLD_SIZE']):
            time.sleep(0.01)
        if os.environ.get('LOCAL_RANK') == '0' and os.getppid() > 1:
            os.kill(os.getppid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    if str(distributed.rank()) == os.environ.get('KILL_RANK'):
        os.kill(os.getpid(), signal.SIGKILL)


def _stop_requested():
    """Whether the run got a stop signal (SIGTERM, as torchrun's agent sends to restart the job)."""
    stop = getattr(signal.getsignal(signal.SIGTERM), '__self__', None)       # the run's GracefulStop
    return stop is not None and bool(stop.received)


def hold(path):
    """Create ``path`` and wait while it exists, until the run is told to stop: the batch then completes and the
    run writes its checkpoint and stops."""
    open(path, 'w').close()
    while os.path.exists(path) and not _stop_requested():
        time.sleep(0.01)


def wait_for_nodes():
    """A job that formed before every node came (a slow start): wait, before any batch, until torchrun restarts it
    with the nodes that joined (its SIGTERM), and leave without a checkpoint, so that the job starts afresh."""
    while not _stop_requested():
        time.sleep(0.01)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def config():
    """The jobs' model config, sharded as ``SHARDING`` says."""
    sharding = os.environ.get('SHARDING')
    return {**dist_jobs.config(), **({'sharding': sharding} if sharding else {})}


def whole(param):
    """A parameter's whole value (a sharded one's gathered: every rank calls it, in the same order)."""
    return param.full_tensor() if hasattr(param, 'full_tensor') else param


def train(folder, out):
    pipeline = (Pipeline()
                .init_variable('loss', [])
                .init_variable('ids', [])
                .init_model('net', config=config())
                .call(die, I('c'))
                .update(V('ids', mode='a'), B.indices)
                .train_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('loss', mode='a'))) << dist_jobs.dataset()
    val = (Pipeline().import_model('net', pipeline).init_variable('losses', [])
           .predict_model('net', x=B.x, y=B.y, fetches='loss', save_to=V('losses', mode='a'))) << dist_jobs.dataset()
    best = ModelCheckpoint(os.path.join(out, 'best'), monitor='val/loss', save_top_k=2)
    # a sharded model validates the whole set on every rank: its forward is a collective (docs/distributed.md)
    callbacks = [Validate(val, batch_size=4, metrics={'loss': lambda p: float(np.mean(p.v('losses')))},
                          shard=not os.environ.get('SHARDING')),
                 ReduceLROnPlateau('net', factor=0.5, patience=0, threshold=0.05), best,
                 CSVLogger(os.path.join(out, 'logs'))]
    checkpoint = Checkpoint(folder, sharded=os.environ.get('SHARDED_CHECKPOINT') == '1')
    pipeline.run(5, n_epochs=3, shuffle=True, seed=11, prefetch=1, checkpoint=checkpoint, resume=True,
                 callbacks=callbacks)
    model = pipeline.m('net')
    return {'params': [whole(p).detach().numpy().copy() for p in model.model.parameters()], 'loss': pipeline.v('loss'),
            'ids': [ids.tolist() for ids in pipeline.v('ids')], 'attempt': os.environ.get('TORCHELASTIC_RESTART_COUNT'),
            'world': distributed.world_size(),
            'lrs': [group['lr'] for group in model.optimizer.param_groups], 'best': os.path.basename(best.best_path)}


if __name__ == '__main__':
    if os.environ.get('DEFAULT_DTYPE'):
        import torch
        torch.set_default_dtype(getattr(torch, os.environ['DEFAULT_DTYPE']))
    result = train(sys.argv[1], sys.argv[2])
    with open(os.path.join(sys.argv[2], f'rank{os.environ["RANK"]}.pkl'), 'wb') as file:
        dill.dump(result, file)
    # The results are written: leave without the interpreter's finalization, as launch()'s workers do. torch keeps
    # a DDP job's gloo threads alive to the end, and one that releases a collective's tensors while Python finalizes
    # aborts the process (see docs/distributed.md), which torchrun would report as a failed job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
