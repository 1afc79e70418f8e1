"""Replicas against a hand-written loop, the cost of gradient reduction per step, and what replicas do to BatchNorm.

Default: one epoch of a small conv net on 1, 2 and 4 logical CPU replicas against a hand-written PyTorch loop.
Setting: 2048 samples of 1x28x28 images, 10 classes, batch 128, SGD, float32; every variant starts from the same
weights and sees the same batches. Logical CPU devices (``'CPU:0'``, ``'CPU:1'``, ...) all compute on the same
cores, so this measures the engine's overhead (splitting, threads, gradient reduction, broadcast), not a
speed-up. Each round runs every variant's epoch in order, then in reverse order (ABBA), with a fixed torch
thread count (``--threads``); per round, each variant's two epochs are divided by the hand-written loop's two
(per-block ratios), and the script prints the median epoch time and the median of the ratios.

``--reduction``: the cost per training step of gathering the gradients on the primary and sending the state back
(``reduce_gradients`` + ``broadcast`` of ``flowpipe.parallel.engines.ReplicaEngine``), on a ResNet18 (62
parameter tensors, 60 buffers, 11.2M parameters) with 2 and 4 replicas, three ways: per tensor (one copy/add per
tensor and replica, as before coalescing), coalesced (what the engine runs: multi-tensor operations on one device,
flat buckets across devices) and through flat buckets (the path across devices, forced on the CPU). Blocks of
``--steps`` reductions alternate ABBA; printed: ms per step (median block), the median per-block ratio against per
tensor, and the aten operations per step that compute or copy (views left out; each is a kernel launch on a GPU,
a multi-tensor operation counts once).
Logical CPU devices first (``--no-cpu`` leaves them out); on GPUs (``'GPU:0x2'``, and ``['GPU:0', 'GPU:1']`` with two)
where CUDA is present.

``--batchnorm``: on the shipped Digits data (8x8 images), a small conv net with BatchNorm, batch 64, SGD; for 1, 2,
4 and 8 replicas it prints how far the first update is from the full-batch update, and the test accuracy after a
few epochs.

Run: ``python bench/replicas.py [--threads 1] [--rounds 5]``, ``python bench/replicas.py --reduction [--steps 5]
[--blocks 11]``, or ``python bench/replicas.py --batchnorm``.
"""
import argparse
import gzip
import os
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from flowpipe.models.torch.networks import resnet18
from flowpipe.parallel import build_engine, make_plan
from flowpipe.parallel.engines import reduce

SAMPLES, BATCH, CLASSES = 2048, 128, 10
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


def abba(arms, rounds, base, sync=lambda: None):
    """Run every arm forward then backward ``rounds`` times; (median seconds per run, median ratio to ``base``)."""
    times = {name: [] for name in arms}
    ratios = {name: [] for name in arms}
    for _ in range(rounds):
        total = dict.fromkeys(arms, 0.0)
        for name in [*arms, *reversed(list(arms))]:
            sync()
            start = time.perf_counter()
            arms[name]()
            sync()
            elapsed = time.perf_counter() - start
            times[name].append(elapsed)
            total[name] += elapsed
        for name in arms:
            ratios[name].append(total[name] / total[base])
    return {name: (statistics.median(times[name]), statistics.median(ratios[name])) for name in arms}


def main(rounds):
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(SAMPLES, 1, 28, 28, generator=generator)
    labels = torch.randint(0, CLASSES, (SAMPLES,), generator=generator)
    variants = {'hand-written loop': hand_written, '1 device (CPU:0)': with_engine('CPU:0'),
                '2 replicas (CPU:0, CPU:1)': with_engine(['CPU:0', 'CPU:1']),
                '4 replicas (CPU:0..CPU:3)': with_engine([f'CPU:{i}' for i in range(4)])}
    runs = {name: make(images, labels) for name, make in variants.items()}
    results = abba({name: epoch for name, (epoch, _) in runs.items()}, rounds, 'hand-written loop')
    for _, close in runs.values():
        close()
    single = results['1 device (CPU:0)'][0]
    print(f'small conv net, one epoch of {SAMPLES} samples, batch {BATCH}, CPU ({os.cpu_count()} cores), '
          f'torch threads {torch.get_num_threads()}, {rounds} ABBA rounds: median epoch, median per-round ratio')
    print(f'{"variant":>28} {"epoch s":>8} {"vs hand":>8} {"vs 1 device":>12}')
    for name, (median, ratio) in results.items():
        print(f'{name:>28} {median:8.2f} {ratio:8.2f} {median / single:12.2f}')


class CountOps(TorchDispatchMode):
    """Counts the aten operations run inside it that compute or copy (views, which launch nothing, are left out)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


def reduction_arms(engine):
    sync = engine.gradient_sync
    params, buffers, state, devices = sync.params, sync.buffers, sync.state, engine.devices
    active = tuple(range(len(devices)))

    def per_tensor():
        reduce.reduce_per_tensor(params, active)
        reduce.average_per_tensor(buffers, active)
        reduce.broadcast_per_tensor(state)

    def coalesced():
        engine.reduce_gradients(active)
        engine.broadcast(active)

    def flat_buckets():
        reduce.reduce_gradients(params, active, devices, flatten=True)
        reduce.average_buffers(buffers, active, flatten=True)
        reduce.broadcast(state, devices, flatten=True)
    return {'per tensor': per_tensor, 'coalesced': coalesced, 'flat buckets': flat_buckets}


def reduction_cost(device, steps, blocks):
    """Print the three reductions' cost per step for replicas on ``device`` (a device spec)."""
    torch.manual_seed(0)
    plan = make_plan(device)
    with build_engine(resnet18((3, 32, 32), CLASSES), plan) as engine:
        count = len(plan.devices)
        images, labels = torch.randn(2 * count, 3, 32, 32), torch.randint(0, CLASSES, (2 * count,))
        engine.train_step([images], [labels], F.cross_entropy, torch.optim.SGD(engine.parameters(), lr=0.0))
        arms = reduction_arms(engine)
        ops = {}
        for name, arm in arms.items():
            with CountOps() as counter:
                arm()
            ops[name] = counter.count
        sync = torch.cuda.synchronize if any(d.device.type == 'cuda' for d in plan.devices) else lambda: None
        repeated = {name: (lambda arm=arm: [arm() for _ in range(steps)]) for name, arm in arms.items()}
        results = abba(repeated, blocks, 'per tensor', sync)
    names = ', '.join(d.name for d in plan.devices)
    for name, (median, ratio) in results.items():
        print(f'{names:>28} {name:>14} {median / steps * 1e3:10.2f} {ratio:8.2f} {ops[name]:>8}')


def reduction(steps, blocks, cpu=True):
    print(f'ResNet18 (62 parameter tensors, 60 buffers, 11.2M parameters): gradients summed on the primary, buffers '
          f'averaged, state broadcast; torch threads {torch.get_num_threads()}, {blocks} ABBA blocks of {steps} '
          f'steps')
    print(f'{"replicas":>28} {"reduction":>14} {"ms/step":>10} {"vs per tensor":>8} {"aten ops":>8}')
    for count in (2, 4) if cpu else ():
        reduction_cost([f'CPU:{i}' for i in range(count)], steps, blocks)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        print('no GPU was available: the GPU arm (GPU:0x2, and GPU:0 + GPU:1 with two GPUs) did not run')
        return
    reduction_cost('GPU:0x2', steps, blocks)
    if gpus >= 2:
        reduction_cost(['GPU:0', 'GPU:1'], steps, blocks)


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--batchnorm', action='store_true', help='the effect of replicas on BatchNorm')
    parser.add_argument('--reduction', action='store_true', help='reduction cost per step, coalesced vs per tensor')
    parser.add_argument('--threads', type=int, default=1, help='torch threads (fixed for the whole run)')
    parser.add_argument('--rounds', type=int, default=5, help='ABBA rounds of epochs')
    parser.add_argument('--steps', type=int, default=5, help='reductions per block (--reduction)')
    parser.add_argument('--blocks', type=int, default=11, help='ABBA rounds of blocks (--reduction)')
    parser.add_argument('--no-cpu', action='store_true', help='the GPU arm of --reduction alone')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.batchnorm:
        batchnorm_effect()
    elif args.reduction:
        reduction(args.steps, args.blocks, cpu=not args.no_cpu)
    else:
        main(args.rounds)
