"""What dropout masks drawn by item cost: ``'randomness': 'by_item'`` against ``'torch'``, per training step.

Setting: the small CNN of ``flowpipe.models.torch.networks.SimpleCNNNetwork`` (filters 16, 32, 64, BatchNorm) on
3x32x32 images, 10 classes, batch 64, Adam, float32, with ``dropout=0.5`` before its head (the ready network's
dropout, the case that decides the default); and the same CNN with an ``nn.Dropout(0.2)`` after every convolution
as well (element-wise masks over whole feature maps: the most hashing a small CNN asks for). Both arms start from
the same weights and see the same batches with the same step seeds. Blocks of ``--steps`` training steps alternate
ABBA (``'torch'``, ``'by_item'``, ``'by_item'``, ``'torch'``) for ``--rounds`` rounds in one process, with a fixed
torch thread count (``--threads``); printed: the median step time of each arm and the median of the per-round ratios
``by_item / torch``.

The CPU arm always runs; the GPU arm (``'cuda'``, synchronized around each block) runs where CUDA is present and
prints ``not run (no GPU)`` elsewhere.

Run: ``python bench/randomness.py [--threads 1] [--rounds 7] [--steps 10]``.
"""
import argparse
import os
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.models.torch.networks import SimpleCNNNetwork
from flowpipe.parallel import build_engine, make_plan

BATCH, CLASSES, SHAPE = 64, 10, (3, 32, 32)


def network(every_conv):
    torch.manual_seed(0)
    net = SimpleCNNNetwork(SHAPE, CLASSES, dropout=0.5)
    if every_conv:
        for block in [net.initial_block, *net.body]:
            if not isinstance(block, nn.MaxPool2d):
                block.append(nn.Dropout(0.2))
    return net


def arm(every_conv, randomness, device, batches):
    engine = build_engine(network(every_conv), make_plan(device, randomness=randomness))
    optimizer = torch.optim.Adam(engine.parameters(), lr=1e-3)
    state = {'step': 0}

    def block(steps):
        for _ in range(steps):
            images, labels = batches[state['step'] % len(batches)]
            engine.train_step([images], [labels], F.cross_entropy, optimizer, seed=state['step'])
            state['step'] += 1
    return block, engine.close


def measure(every_conv, device, rounds, steps):
    generator = torch.Generator().manual_seed(0)
    batches = [(torch.randn(BATCH, *SHAPE, generator=generator).to(device),
                torch.randint(0, CLASSES, (BATCH,), generator=generator).to(device)) for _ in range(4)]
    sync = torch.cuda.synchronize if device.startswith('cuda') else (lambda: None)
    arms = {name: arm(every_conv, name, device, batches) for name in ('torch', 'by_item')}
    for block, _ in arms.values():      # warm-up: first calls, allocator, Adam's state
        block(2)
    times, ratios = {name: [] for name in arms}, []
    for _ in range(rounds):
        total = dict.fromkeys(arms, 0.0)
        for name in ('torch', 'by_item', 'by_item', 'torch'):
            sync()
            start = time.perf_counter()
            arms[name][0](steps)
            sync()
            elapsed = (time.perf_counter() - start) / steps
            times[name].append(elapsed)
            total[name] += elapsed
        ratios.append(total['by_item'] / total['torch'])
    for _, close in arms.values():
        close()
    return statistics.median(times['torch']), statistics.median(times['by_item']), statistics.median(ratios)


def report(device, rounds, steps):
    for every_conv, label in ((False, 'small CNN, dropout 0.5 before the head'),
                              (True, 'small CNN, + dropout 0.2 after every convolution')):
        torch_s, by_item_s, ratio = measure(every_conv, device, rounds, steps)
        print(f'{device:>5} {label:<50} {torch_s * 1e3:9.2f} {by_item_s * 1e3:11.2f} {ratio:7.3f} '
              f'{(ratio - 1) * 100:+8.1f}%')


def main(threads, rounds, steps):
    torch.set_num_threads(threads)
    print(f'batch {BATCH} of 3x32x32, Adam, float32; torch threads {torch.get_num_threads()} ({os.cpu_count()} cores); '
          f'{rounds} ABBA rounds of {steps} steps: median step ms, median per-round ratio by_item / torch')
    print(f'{"":>5} {"model":<50} {"torch ms":>9} {"by_item ms":>11} {"ratio":>7} {"cost":>9}')
    report('cpu', rounds, steps)
    if torch.cuda.is_available():
        report('cuda', rounds, steps)
    else:
        print(' cuda GPU arm: not run (no GPU)')


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--steps', type=int, default=10)
    args = parser.parse_args()
    main(args.threads, args.rounds, args.steps)
