"""One epoch on 1, 2 (and 4) gloo processes against one process, the same global batch: wall time, the time
a step spends communicating, and the items each rank processed, printed as ratios measured in one run.

Setting: 32768 synthetic items of 64 features, 10 classes, an MLP 64-512-512-10 in float32, SGD, global batch
256 (128 steps), one torch thread per process, the pipeline ``train_model`` as users write it. Every arm runs in
processes started by ``flowpipe.parallel.launch`` (the 1-process arm too, so all pay the same start-up, which is
not timed): the epoch is timed on rank 0 between two barriers. The arms run in rounds, the order alternating
(1, 2, 4 then 4, 2, 1: ABBA); each ratio is the median over rounds of the ratio within a round.

Communication per step: after the epoch, each rank times what one step exchanges — the all-gather of the item
counts, the all-reduce of a gradient-sized float32 buffer, the all-reduce of the loss — 50 times; the median,
beside the median step time of the epoch.

The NCCL arm runs the same on GPUs (one process per GPU, ``device='GPU:*'``) where at least two CUDA devices
are visible, and says so where none are.

Run: ``python bench/distributed.py [--rounds 3]``.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ITEMS, FEATURES, CLASSES, BATCH, HIDDEN = 32768, 64, 10, 256, 512


def epoch(device='cpu'):
    """Rank 0's wall time of one epoch, the step's communication time and the items each rank processed."""
    import torch
    from torch import nn

    from flowpipe import B, Dataset, Pipeline, V
    from flowpipe.parallel import distributed

    rng = np.random.default_rng(0)
    data = Dataset(ITEMS, preloaded={'x': rng.normal(size=(ITEMS, FEATURES)).astype(np.float32),
                                     'y': rng.integers(0, CLASSES, size=ITEMS)})
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                            nn.Linear(HIDDEN, CLASSES))
    config = {'model': network, 'inputs/x/shape': (FEATURES,), 'inputs/y/classes': CLASSES, 'loss': 'ce',
              'optimizer': {'name': 'SGD', 'lr': 0.01}, 'device': device}
    pipeline = (Pipeline().init_variable('items', 0).init_variable('steps', []).init_model('net', config=config)
                .update(V('items'), V('items') + B.size)
                .call(lambda: time.perf_counter(), save_to=V('steps', mode='a'))
                .train_model('net', x=B.x, y=B.y)) << data
    pipeline.run(BATCH, n_iters=2, shuffle=True, seed=1)        # warm-up: the model is built, DDP set up
    pipeline.set_variable('items', 0)
    pipeline.set_variable('steps', [])
    distributed.barrier()
    start = time.perf_counter()
    pipeline.run(BATCH, n_epochs=1, shuffle=True, seed=2)
    distributed.barrier()
    wall = time.perf_counter() - start
    stamps = pipeline.v('steps')
    step = statistics.median(np.diff(stamps)) if len(stamps) > 1 else wall
    parameters = sum(p.numel() for p in network.parameters())
    return {'wall': wall, 'step': step, 'comm': _communication(parameters, device),
            'items': distributed.gather(pipeline.v('items'), dst=None)}


def _communication(parameters, device):
    """Median seconds of one step's collectives (counts, gradients, loss); 0 in one process."""
    import torch
    import torch.distributed as dist
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return 0.0
    place = torch.device('cuda', torch.cuda.current_device()) if dist.get_backend() == 'nccl' else 'cpu'
    counts, gradient = torch.ones(1, dtype=torch.int64, device=place), torch.ones(parameters, device=place)
    loss = torch.ones((), dtype=torch.float64, device=place)
    times = []
    for _ in range(50):
        start = time.perf_counter()
        dist.all_gather([torch.empty_like(counts) for _ in range(dist.get_world_size())], counts)
        dist.all_reduce(gradient)
        dist.all_reduce(loss)
        if place != 'cpu':
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(worlds, rounds, device, backend):
    from flowpipe.parallel import launch
    results = {world: [] for world in worlds}
    for round_ in range(rounds):
        for world in (worlds if round_ % 2 == 0 else worlds[::-1]):
            env = {'FLOWPIPE_DIST_BACKEND': backend, 'OMP_NUM_THREADS': '1'}
            place = 'GPU:0' if world == 1 and device != 'cpu' else device     # one process: one GPU
            results[world].append(launch(epoch, world, kwargs={'device': place}, timeout=600, env=env)[0])
    return results


def report(title, results, rounds):
    worlds = sorted(results)
    load = ', '.join(f'{value:.1f}' for value in os.getloadavg())
    print(f'\n{title}: global batch {BATCH}, {ITEMS} items, {rounds} rounds (medians; ratios within a round); '
          f'load average now {load} on {os.cpu_count()} cores')
    print('processes | epoch wall s | wall vs 1 process | step ms | comm ms per step | comm / step | '
          'items per rank / global')
    for world in worlds:
        runs = results[world]
        ratio = statistics.median(run['wall'] / base['wall'] for run, base in zip(runs, results[worlds[0]]))
        step = statistics.median(run['step'] for run in runs)
        comm = statistics.median(run['comm'] for run in runs)
        shares = ', '.join(f'{count / ITEMS:.3f}' for count in runs[0]['items'])
        print(f'{world:>9} | {statistics.median(run["wall"] for run in runs):12.3f} | {ratio:17.3f} | '
              f'{step * 1e3:7.2f} | {comm * 1e3:16.3f} | {comm / step:11.3f} | {shares}')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=3)
    rounds = parser.parse_args().rounds
    cores = os.cpu_count() or 1
    worlds = [1, 2] + ([4] if cores >= 4 else [])
    if cores < 4:
        print(f'4 processes: not run, {cores} cores here (4 processes would share {cores} cores).')
    report('gloo on the CPU, one thread per process', measure(worlds, rounds, 'cpu', 'gloo'), rounds)
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        print(f'\nNCCL arm: not run, {gpus} CUDA device(s) visible here (it needs at least 2).')
        return
    gpu_worlds = [1] + [n for n in (2, 4, 8) if n <= gpus]
    report(f'NCCL on {gpus} GPUs', measure(gpu_worlds, rounds, 'GPU:*', 'nccl'), rounds)


if __name__ == '__main__':
    sys.exit(main())
