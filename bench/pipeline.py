"""Pipeline parallelism against DDP on 2 gloo processes: the parameter bytes each rank holds and the step time,
printed as ratios measured in one run.

Setting: 4096 synthetic items of 256 features, 10 classes, an MLP 256-1024-1024-1024-10 (as an ``nn.Sequential``
of 7 children) in float32, Adam, global batch 256, one torch thread per process, the pipeline ``train_model`` as
users write it. Arm A: DDP (``'pipeline'`` off, each rank the whole network and half of each batch). Arm B:
``'pipeline': 2`` (each rank one stage, both ranks every item), micro-batches of 64 on the 1F1B schedule. Each arm
runs in 2 processes started by ``flowpipe.parallel.launch`` (start-up not timed); rank 0 times the steps of an
epoch after two warm-up steps and reports the median step. The arms run in rounds ordered A B B A; each ratio is
the median over rounds of the ratio within a round.

Run: ``python bench/pipeline.py [--rounds 4] [--device cpu]``. ``--device cuda`` is the GPU arm: one GPU per rank
(each rank takes ``cuda:LOCAL_RANK``) over NCCL, on a machine with 2 GPUs or more; with fewer it says why and exits
with status 2 (NCCL refuses two ranks on one GPU, and gloo, which lets ranks share one, does not send CUDA tensors
from rank to rank, which the stages do).
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

ITEMS, FEATURES, CLASSES, BATCH, HIDDEN, MICRO = 4096, 256, 10, 256, 1024, 64


def epoch(stages=None, device='cpu'):
    """Rank 0's median step time (s) and the parameter bytes every rank holds."""
    import torch
    from torch import nn

    from flowpipe import B, Dataset, Pipeline, V
    from flowpipe.parallel import distributed

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    data = Dataset(ITEMS, preloaded={'x': rng.normal(size=(ITEMS, FEATURES)).astype(np.float32),
                                     'y': rng.integers(0, CLASSES, size=ITEMS)})
    torch.manual_seed(0)
    network = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                            nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    config = {'model': network, 'inputs/x/shape': (FEATURES,), 'inputs/y/classes': CLASSES, 'loss': 'ce',
              'optimizer': 'Adam', 'device': device, 'pipeline': stages, 'microbatch': MICRO if stages else None}
    pipeline = (Pipeline().init_variable('steps', []).init_model('net', config=config)
                .call(lambda: time.perf_counter(), save_to=V('steps', mode='a'))
                .train_model('net', x=B.x, y=B.y)) << data
    pipeline.run(BATCH, n_iters=2, shuffle=True, seed=1)        # warm-up: the model built, the schedules made
    pipeline.set_variable('steps', [])
    distributed.barrier()
    pipeline.run(BATCH, n_epochs=1, shuffle=True, seed=2)
    distributed.barrier()
    model = pipeline.m('net')
    held = sum(p.numel() * p.element_size() for p in model.model.parameters() if p.device.type != 'meta')
    return {'step': statistics.median(np.diff(pipeline.v('steps'))), 'bytes': distributed.gather(held, dst=None)}


def check_gpus(device):
    """Exit with the reason where ``device`` is not the CPU and fewer than 2 GPUs are visible."""
    if device == 'cpu':
        return
    import torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        print(f"Expected 2 GPUs for --device {device}: one per rank, over NCCL. Received: {count} GPU(s). NCCL refuses "
              "two ranks on one GPU, and gloo, which lets ranks share one, does not send CUDA tensors from rank to "
              "rank, which the pipeline's stages do. Run it with --device cpu, or on a machine with 2 GPUs.",
              file=sys.stderr)
        sys.exit(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=4)
    parser.add_argument('--device', default='cpu')
    args = parser.parse_args()
    check_gpus(args.device)
    from flowpipe.parallel import launch
    backend = 'gloo' if args.device == 'cpu' else 'nccl'
    env = {'FLOWPIPE_DIST_BACKEND': backend, 'OMP_NUM_THREADS': '1'}
    arms = {'ddp': None, 'pipeline': 2}
    results = {name: [] for name in arms}
    for round_ in range(args.rounds):
        for name in (('ddp', 'pipeline') if round_ % 2 == 0 else ('pipeline', 'ddp')):
            results[name].append(launch(epoch, 2, kwargs={'stages': arms[name], 'device': args.device},
                                        timeout=1200, env=env)[0])
    ratio = statistics.median(p['step'] / d['step'] for p, d in zip(results['pipeline'], results['ddp']))
    load = ', '.join(f'{value:.1f}' for value in os.getloadavg())
    print(f'2 processes ({backend}, {args.device}), global batch {BATCH}, {args.rounds} rounds ABBA; load average '
          f'{load} on {os.cpu_count()} cores')
    print('arm | parameter bytes per rank | median step ms')
    for name, runs in results.items():
        held = ', '.join(f'{size:,}' for size in runs[0]['bytes'])
        print(f'{name} | {held} | {statistics.median(run["step"] for run in runs) * 1e3:.1f}')
    largest = max(results['pipeline'][0]['bytes']) / max(results['ddp'][0]['bytes'])
    print(f'pipeline / DDP: largest parameter bytes on a rank {largest:.3f}, step time {ratio:.3f} '
          f'(median of per-round ratios)')


if __name__ == '__main__':
    main()
