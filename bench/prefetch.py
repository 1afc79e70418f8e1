"""What prefetch buys on a preprocessing-heavy run: prefetch 0 vs 2 vs 4, and a hand-written PyTorch loop.

Preprocessing is torch kernels that release the GIL (resize by interpolation, a depthwise blur convolution,
normalisation) on a batch of images; training is a small CNN step taken with ``use_lock=True``. The hand-written
loop does the same work, batch after batch, in one thread. All variants are measured alternately in one run
(round robin, shuffled), so that a change in machine load hits them alike; the median per variant is reported,
with the cores the process kept busy (CPU time / wall time): on a machine shared with other work that number,
and the 2-thread ceiling printed first, say how much parallelism was there to be had.
Run: ``.venv/bin/python bench/prefetch.py [n_batches] [rounds]``.

Targets on 2 cores: preprocessing alone >= 1.6x faster with prefetch than without; preprocessing + training
>= 1.3x faster than the hand-written sequential loop.
"""
import random
import statistics
import sys
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F

from flowpipe.batch import Batch, action
from flowpipe.data import Dataset
from flowpipe.execution import Prefetcher
from flowpipe.expr import B
from flowpipe.pipeline import Pipeline

# One thread per kernel: the cores are shared out by prefetching whole batches in parallel, which is what this
# measures; intra-op threads on top would fight the prefetch workers for the same 2 cores (and the hand-written
# loop gets the same single thread, so both sides do identical work per kernel).
torch.set_num_threads(1)

BATCH_SIZE, SOURCE, TARGET, N_CLASSES = 32, 128, 96, 10


def preprocess(images: np.ndarray) -> torch.Tensor:
    """Resize, blur and normalise a batch of images (N, 3, H, W)."""
    x = torch.from_numpy(images)
    x = F.interpolate(x, size=(TARGET, TARGET), mode='bicubic', align_corners=False)
    kernel = torch.full((3, 1, 5, 5), 1.0 / 25.0)
    x = F.conv2d(x, kernel, padding=2, groups=3)
    x = F.conv2d(x, kernel, padding=2, groups=3)
    return (x - x.mean(dim=(2, 3), keepdim=True)) / (x.std(dim=(2, 3), keepdim=True) + 1e-6)


class HeavyBatch(Batch):
    """Images and labels with the preprocessing above as an action."""
    components = ('images', 'labels')

    @action
    def prepare(self):
        self.images = preprocess(self.images)
        return self


class Trainer:
    """A small CNN and its optimizer; ``step`` is one training step on a batch."""

    def __init__(self):
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, N_CLASSES))
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.01)

    def step(self, images: torch.Tensor, labels: np.ndarray) -> float:
        loss = F.cross_entropy(self.net(images), torch.as_tensor(labels))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def make_dataset(n_items: int) -> Dataset:
    rng = np.random.default_rng(0)
    images = rng.random((n_items, 3, SOURCE, SOURCE), dtype=np.float32)
    return Dataset(n_items, batch_class=HeavyBatch,
                   preloaded={'images': images, 'labels': rng.integers(0, N_CLASSES, n_items)})


def hand_loop(dataset: Dataset, n_batches: int, train: bool) -> None:
    """The same work without flowpipe: draw indices, slice the arrays, preprocess, train."""
    images, labels = dataset.preloaded['images'], dataset.preloaded['labels']
    trainer = Trainer()
    for start in range(0, n_batches * BATCH_SIZE, BATCH_SIZE):
        positions = np.arange(start, start + BATCH_SIZE) % len(images)
        x = preprocess(images[positions])
        if train:
            trainer.step(x, labels[positions])


def pipeline_run(dataset: Dataset, n_batches: int, train: bool, prefetch: int) -> None:
    pipeline = Pipeline().prepare()
    if train:
        pipeline = pipeline.call(Trainer().step, B.images, B.labels, use_lock=True)
    (pipeline << dataset).run(BATCH_SIZE, n_iters=n_batches, prefetch=prefetch)


def measure(variants: dict, rounds: int, n_batches: int) -> dict:
    """Median (ms per batch, cores used) of each variant, measured round robin in a shuffled order."""
    times: dict = {name: [] for name in variants}
    cores: dict = {name: [] for name in variants}
    order = list(variants)
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            start, cpu = time.perf_counter(), time.process_time()
            variants[name]()
            wall = time.perf_counter() - start
            times[name].append(wall / n_batches * 1e3)
            cores[name].append((time.process_time() - cpu) / wall)
    return {name: (statistics.median(times[name]), statistics.median(cores[name])) for name in variants}


def thread_ceiling(dataset: Dataset, n_batches: int, rounds: int) -> float:
    """How much faster 2 bare threads run the preprocessing than 1: the most prefetch can gain on this machine."""
    images = dataset.preloaded['images'][:BATCH_SIZE]

    def work(count: int) -> None:
        for _ in range(count):
            preprocess(images)

    def two_threads() -> None:
        threads = [threading.Thread(target=work, args=(n_batches // 2,)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    results = measure({'one': lambda: work(n_batches), 'two': two_threads}, rounds, n_batches)
    return results['one'][0] / results['two'][0]


def handoff_cost(n_items: int = 3000) -> None:
    """Microseconds the prefetcher adds per item when the work itself is nothing."""
    costs = []
    for size in (0, 1, 2, 4):
        start = time.perf_counter()
        for _ in Prefetcher(range(n_items), lambda seq, item: item, size):
            pass
        costs.append(f"size={size}: {(time.perf_counter() - start) / n_items * 1e6:.1f} us")
    print("prefetcher hand-off cost per item (no-op work): " + ', '.join(costs))


def main(n_batches: int = 40, rounds: int = 5) -> None:
    dataset = make_dataset(BATCH_SIZE * 8)
    print(f"torch threads per kernel: {torch.get_num_threads()}; "
          f"2 bare threads vs 1 on the preprocessing: {thread_ceiling(dataset, n_batches, rounds):.2f}x "
          "(the ceiling for prefetch on this machine now)")
    for train in (False, True):
        variants = {'hand-written loop': lambda: hand_loop(dataset, n_batches, train)}
        for prefetch in (0, 2, 4):
            variants[f'prefetch={prefetch}'] = lambda p=prefetch: pipeline_run(dataset, n_batches, train, p)
        measure(variants, 1, 4)                         # warm-up: first calls allocate and load kernels
        results = measure(variants, rounds, n_batches)
        base, hand = results['prefetch=0'][0], results['hand-written loop'][0]
        print(f"\n{'preprocessing + training' if train else 'preprocessing only'} "
              f"({n_batches} batches of {BATCH_SIZE}, median of {rounds} rounds)")
        for name, (ms, used) in results.items():
            print(f"  {name:18s} {ms:7.2f} ms/batch   {base / ms:5.2f}x vs prefetch=0   {hand / ms:5.2f}x vs hand loop"
                  f"   {used:4.2f} cores busy")
    print()
    handoff_cost()
    print("targets on 2 cores: preprocessing only >= 1.6x vs prefetch=0; "
          "preprocessing + training >= 1.3x vs the hand-written loop")


if __name__ == '__main__':
    main(*(int(arg) for arg in sys.argv[1:3]))
