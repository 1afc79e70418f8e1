"""What sharding saves per rank, and what it costs per step: DDP against ``'sharding': 'full'`` and ``'grad_op'``.

Setting: an MLP of 512 inputs, 4 hidden layers of 3072 units and 10 classes (29.9 M float32 parameters), Adam, a
global batch of 64 synthetic items, the pipeline ``train_model`` as users write it, on 2 gloo processes (and 4 where
the machine has 4 cores or more), one torch thread per process, started by ``flowpipe.parallel.launch``.

Per rank, after the timed steps (gradients and Adam's state are then held, as between any two steps):

- parameters, gradients and optimizer state: the bytes of the storages of the tensors this rank holds (a sharded
  parameter's local shard; each storage counted once);
- peak RSS: the process's high-water resident memory (``ru_maxrss``), which adds torch itself, activations, DDP's
  gradient buckets and, under sharding, the whole parameters gathered for a forward or backward.

Step time: the median over the timed steps of rank 0, each arm against DDP in the same round; the arms run in
rounds whose order alternates (DDP, full, grad_op, then grad_op, full, DDP: A B B A); the ratio printed is the median
over rounds of the ratio within a round.

The NCCL arm runs the same on GPUs (one process per GPU) where at least two CUDA devices are visible, reading
``torch.cuda.max_memory_allocated`` for the peak, and says so where they are not.

Run: ``python bench/sharding.py [--rounds 2] [--steps 6]``.
"""
import argparse
import os
import resource
import statistics
import sys
import time

import numpy as np

FEATURES, HIDDEN, LAYERS, CLASSES, BATCH = 512, 3072, 4, 10, 64
ARMS = (None, 'full', 'grad_op')


def held_bytes(model):
    """This rank's bytes of parameters, gradients and optimizer state (each storage once; a shard's local one)."""
    import torch

    from flowpipe.parallel.engines.sharded import storage_bytes
    params = list(model.model.parameters())
    state = [value for values in model.optimizer.state.values() for value in values.values()
             if isinstance(value, torch.Tensor) and value.dim() > 0]      # Adam's step counts are scalars
    return {'parameters': storage_bytes(params), 'gradients': storage_bytes(p.grad for p in params
                                                                               if p.grad is not None),
            'optimizer': storage_bytes(state)}


def job(sharding, steps, device='cpu'):
    """Train ``steps`` timed steps after two warm-up steps; rank 0's step times, every rank's bytes and peak."""
    import torch

    from flowpipe import B, Dataset, Pipeline, V
    from flowpipe.models.torch import MLP
    from flowpipe.parallel import distributed

    torch.set_num_threads(1)
    items = BATCH * (steps + 2)
    rng = np.random.default_rng(0)
    data = Dataset(items, preloaded={'x': rng.normal(size=(items, FEATURES)).astype(np.float32),
                                     'y': rng.integers(0, CLASSES, size=items)})
    torch.manual_seed(0)
    config = {'inputs/x/shape': (FEATURES,), 'inputs/y/classes': CLASSES, 'initial_block/inputs': 'x',
              'body/units': (HIDDEN,) * LAYERS, 'optimizer': 'Adam', 'device': device, 'sharding': sharding}
    pipeline = (Pipeline().init_variable('stamps', []).init_model('net', MLP, config=config)
                .call(time.perf_counter, save_to=V('stamps', mode='a'))
                .train_model('net', x=B.x, y=B.y)) << data
    pipeline.run(BATCH, n_iters=2)                                   # warm-up: built, sharded, Adam's state made
    pipeline.set_variable('stamps', [])
    distributed.barrier()
    pipeline.run(BATCH, n_iters=steps)
    distributed.barrier()
    steps_s = list(np.diff(pipeline.v('stamps')))
    model = pipeline.m('net')
    if device == 'cpu':
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    else:
        peak = torch.cuda.max_memory_allocated()
    count = sum(p.numel() for p in model.model.parameters())
    count = int(distributed.reduce(count)) if sharding else count
    return {'steps': steps_s, 'bytes': held_bytes(model), 'peak': peak, 'parameters': count}


def measure(world, rounds, steps, device, backend):
    from flowpipe.parallel import launch
    results = {arm: [] for arm in ARMS}
    env = {'FLOWPIPE_DIST_BACKEND': backend, 'OMP_NUM_THREADS': '1'}
    for round_ in range(rounds):
        for arm in (ARMS if round_ % 2 == 0 else ARMS[::-1]):
            results[arm].append(launch(job, world, args=(arm, steps), kwargs={'device': device}, timeout=600,
                                       env=env))
    return results


def report(title, world, results, peak_name):
    mb = 1024 ** 2
    ddp = results[None]
    print(f'\n{title}: {world} processes, global batch {BATCH}, '
          f'{ddp[0][0]["parameters"] / 1e6:.1f} M parameters, Adam; load average now '
          f'{", ".join(f"{value:.1f}" for value in os.getloadavg())} on {os.cpu_count()} cores')
    print(f'sharding | params MB | grads MB | Adam MB | sum MB per rank | sum / DDP | {peak_name} MB per rank | '
          'step ms | step / DDP')
    base = sum(ddp[0][0]['bytes'].values())
    for arm in ARMS:
        runs = results[arm]
        held = runs[0][0]['bytes']                       # the same on every round; rank 0 (the ranks differ <1%)
        total = sum(held.values())
        peak = max(rank['peak'] for rank in runs[-1]) / mb
        step = statistics.median(s for run in runs for s in run[0]['steps'])
        ratio = statistics.median(statistics.median(run[0]['steps']) / statistics.median(other[0]['steps'])
                                  for run, other in zip(runs, ddp))
        print(f'{arm or "DDP":>8} | {held["parameters"] / mb:9.1f} | {held["gradients"] / mb:8.1f} | '
              f'{held["optimizer"] / mb:7.1f} | {total / mb:15.1f} | {total / base:9.3f} | {peak:14.0f} | '
              f'{step * 1e3:7.1f} | {ratio:10.3f}')
    full = sum(results['full'][0][0]['bytes'].values()) / base
    print(f"'full' on {world} ranks: parameters + gradients + Adam state per rank / DDP's = {full:.3f} "
          f"(ideal {1 / world:.3f}; {'within' if full <= 0.6 * 2 / world else 'above'} "
          f"{0.6 * 2 / world:.2f})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--steps', type=int, default=6)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    worlds = [2] + ([4] if cores >= 4 else [])
    if cores < 4:
        print(f'4 processes: not run, {cores} cores here (4 processes would share {cores} cores).')
    for world in worlds:
        report('gloo on the CPU, one thread per process', world,
               measure(world, args.rounds, args.steps, 'cpu', 'gloo'), 'peak RSS')
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        print(f'\nNCCL arm: not run, {gpus} CUDA device(s) visible here (it needs at least 2).')
        return
    for world in [n for n in (2, 4, 8) if n <= gpus]:
        report(f'NCCL on {world} GPUs', world, measure(world, args.rounds, args.steps, 'GPU:*', 'nccl'),
               'peak CUDA')


if __name__ == '__main__':
    sys.exit(main())
