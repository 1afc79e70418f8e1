"""One epoch of a small conv net on 1, 2 and 4 logical CPU replicas, against a hand-written PyTorch loop.

Setting: 2048 samples of 1x28x28 images, 10 classes, batch 128, SGD, float32. Every variant starts from the
same weights and sees the same batches. Logical CPU devices (``'CPU:0'``, ``'CPU:1'``, ...) all compute on
the same cores, so this measures the engine's overhead (splitting, threads, gradient reduction, broadcast),
not a speed-up: with N GPUs the same code runs each replica on its own device. Each variant runs ``ROUNDS``
epochs in turns with the others (so load from other processes hits all alike); the median epoch is reported.

``python bench/replicas.py --batchnorm`` measures instead what replicas do to a network with BatchNorm (each
replica normalizes its shard with the shard's statistics): on the shipped Digits data (8x8 images), a small
conv net with BatchNorm, batch 64, SGD; for 1, 2, 4 and 8 replicas it prints how far the first update is from the
full-batch update, and the test accuracy after a few epochs.

Run: ``python bench/replicas.py`` or ``python bench/replicas.py --batchnorm``.
"""
import gzip
import os
import sys
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import build_engine, make_plan

SAMPLES, BATCH, CLASSES, ROUNDS = 2048, 128, 10, 3
BN_BATCH, BN_EPOCHS = 64, 3


def convnet():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(32 * 7 * 7, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def hand_written(images, labels):
    model = convnet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def epoch():
        for start in range(0, SAMPLES, BATCH):
            optimizer.zero_grad()
            F.cross_entropy(model(images[start:start + BATCH]), labels[start:start + BATCH]).backward()
            optimizer.step()
    return epoch, lambda: None


def with_engine(device):
    def make(images, labels):
        engine = build_engine(convnet(), make_plan(device))
        optimizer = torch.optim.SGD(engine.parameters(), lr=0.05)

        def epoch():
            for start in range(0, SAMPLES, BATCH):
                engine.train_step([images[start:start + BATCH]], [labels[start:start + BATCH]], F.cross_entropy,
                                  optimizer)
        return epoch, engine.close
    return make


def main():
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(SAMPLES, 1, 28, 28, generator=generator)
    labels = torch.randint(0, CLASSES, (SAMPLES,), generator=generator)
    variants = {'hand-written loop': hand_written, '1 device (CPU:0)': with_engine('CPU:0'),
                '2 replicas (CPU:0, CPU:1)': with_engine(['CPU:0', 'CPU:1']),
                '4 replicas (CPU:0..CPU:3)': with_engine([f'CPU:{i}' for i in range(4)])}
    runs = {name: make(images, labels) for name, make in variants.items()}
    times = {name: [] for name in runs}
    for _ in range(ROUNDS):
        for name, (epoch, _) in runs.items():
            start = time.perf_counter()
            epoch()
            times[name].append(time.perf_counter() - start)
    for _, close in runs.values():
        close()
    base = statistics.median(times['hand-written loop'])
    single = statistics.median(times['1 device (CPU:0)'])
    print(f'small conv net, one epoch of {SAMPLES} samples, batch {BATCH}, CPU ({os.cpu_count()} cores), '
          f'torch threads {torch.get_num_threads()}, median of {ROUNDS}')
    print(f'{"variant":>28} {"epoch s":>8} {"vs hand":>8} {"vs 1 device":>12}')
    for name, values in times.items():
        median = statistics.median(values)
        print(f'{name:>28} {median:8.2f} {median / base:8.2f} {median / single:12.2f}')


def digits():
    """The shipped Digits data as tensors: (train images, train labels, test images, test labels)."""
    path = os.path.join(os.path.dirname(__file__), '..', 'flowpipe', 'opensets', 'data', 'digits.csv.gz')
    with gzip.open(path, 'rt') as file:
        rows = torch.tensor([[int(v) for v in line.split(',')] for line in file if line.strip()])
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
    images, labels = rows[order, :64].float().reshape(-1, 1, 8, 8) / 16, rows[order, 64]
    cut = int(0.8 * len(rows))
    return images[:cut], labels[:cut], images[cut:], labels[cut:]


def bn_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
                         nn.Flatten(), nn.Linear(128, CLASSES))


def train_bn(replicas, images, labels, epochs):
    """Train ``bn_net`` on ``replicas`` logical CPU devices; returns (model, first update as one vector)."""
    engine = build_engine(bn_net(), make_plan([f'CPU:{i}' for i in range(replicas)]))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1, momentum=0.9)
    start = torch.cat([p.detach().flatten().clone() for p in engine.parameters()])
    first = None
    with engine:
        for _ in range(epochs):
            for begin in range(0, len(images) - BN_BATCH + 1, BN_BATCH):
                engine.train_step([images[begin:begin + BN_BATCH]], [labels[begin:begin + BN_BATCH]],
                                  F.cross_entropy, optimizer)
                if first is None:
                    first = torch.cat([p.detach().flatten() for p in engine.parameters()]) - start
        return engine.module, first


def batchnorm_effect():
    train_images, train_labels, test_images, test_labels = digits()
    print(f'Digits ({len(train_images)} train / {len(test_images)} test), conv net with BatchNorm, batch {BN_BATCH}, '
          f'SGD lr 0.1 momentum 0.9, {BN_EPOCHS} epochs')
    print(f'{"replicas":>8} {"shard":>6} {"first update vs full batch":>27} {"test accuracy":>14}')
    reference = None
    for replicas in (1, 2, 4, 8):
        model, first = train_bn(replicas, train_images, train_labels, BN_EPOCHS)
        reference = first if reference is None else reference
        model.eval()
        with torch.no_grad():
            accuracy = (model(test_images).argmax(1) == test_labels).float().mean().item()
        difference = ((first - reference).norm() / reference.norm()).item()
        print(f'{replicas:>8} {BN_BATCH // replicas:>6} {difference:>26.1%} {accuracy:>14.3f}')


if __name__ == '__main__':
    if sys.argv[1:] == ['--batchnorm']:
        batchnorm_effect()
    else:
        main()
