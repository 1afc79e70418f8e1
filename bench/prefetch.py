"""What prefetch buys on a preprocessing-heavy run, with ordered writes on: prefetch 0 vs 2 vs 4, and a hand loop.

Preprocessing is torch kernels that release the GIL (resize by interpolation, a depthwise blur convolution,
normalisation) on a batch of images; training is a small CNN step taken with ``use_lock=True``. The third arm
also writes to pipeline variables the way a notebook does, ordered by default: the loss history
(``save_to=V('loss', mode='a')``) and per-image statistics (``update(V('stats', mode='e'), F(summary)(B.images))``,
whose value is computed concurrently and only the write waits for its batch's turn); its last line compares
those ordered writes with the same writes in finish order (``use_lock=False``). The hand-written loop does the
same work, batch after batch, in one thread.

Every ratio is measured in the same process in alternating blocks (A B B A, so a drift in machine load hits both
sides alike), ``rounds`` times; the median of the per-block ratios is printed, with the cores the faster side kept
busy (CPU time / wall time): on a machine shared with other work that number, and the 2-thread ceiling printed
first, say how much parallelism was there to be had.
Run: ``.venv/bin/python bench/prefetch.py [n_batches] [rounds]``.

Targets on 2 cores: preprocessing alone >= 1.6x faster with prefetch than without; preprocessing + training
>= 1.3x faster than the hand-written sequential loop, with ordered writes too.
"""
import statistics
import sys
import threading
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as TF

from flowpipe.batch import Batch, action
from flowpipe.data import Dataset
from flowpipe.execution import Prefetcher
from flowpipe.expr import B, F, V
from flowpipe.pipeline import Pipeline

# One thread per kernel: the cores are shared out by prefetching whole batches in parallel, which is what this
# measures; intra-op threads on top would fight the prefetch workers for the same 2 cores (and the hand-written
# loop gets the same single thread, so both sides do identical work per kernel).
torch.set_num_threads(1)

BATCH_SIZE, SOURCE, TARGET, N_CLASSES = 32, 128, 96, 10


def preprocess(images: np.ndarray) -> torch.Tensor:
    """Resize, blur and normalise a batch of images (N, 3, H, W)."""
    x = torch.from_numpy(images)
    x = TF.interpolate(x, size=(TARGET, TARGET), mode='bicubic', align_corners=False)
    kernel = torch.full((3, 1, 5, 5), 1.0 / 25.0)
    x = TF.conv2d(x, kernel, padding=2, groups=3)
    x = TF.conv2d(x, kernel, padding=2, groups=3)
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
        loss = TF.cross_entropy(self.net(images), torch.as_tensor(labels))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def make_dataset(n_items: int) -> Dataset:
    rng = np.random.default_rng(0)
    images = rng.random((n_items, 3, SOURCE, SOURCE), dtype=np.float32)
    return Dataset(n_items, batch_class=HeavyBatch,
                   preloaded={'images': images, 'labels': rng.integers(0, N_CLASSES, n_items)})


def summary(images: torch.Tensor) -> list:
    """Per-image mean and standard deviation: a value computed per batch and written to a variable."""
    return torch.stack([images.mean(dim=(1, 2, 3)), images.std(dim=(1, 2, 3))], dim=1).tolist()


def hand_loop(dataset: Dataset, n_batches: int, train: bool, writes: bool = False) -> None:
    """The same work without flowpipe: draw indices, slice the arrays, preprocess, train, record."""
    images, labels = dataset.preloaded['images'], dataset.preloaded['labels']
    trainer, losses, stats = Trainer(), [], []
    for start in range(0, n_batches * BATCH_SIZE, BATCH_SIZE):
        positions = np.arange(start, start + BATCH_SIZE) % len(images)
        x = preprocess(images[positions])
        if writes:
            stats.extend(summary(x))
        if train:
            losses.append(trainer.step(x, labels[positions]))


def pipeline_run(dataset: Dataset, n_batches: int, train: bool, prefetch: int, writes: bool = False,
                 ordered: bool = True) -> None:
    pipeline = Pipeline().prepare()
    if writes:
        # Ordered by default; use_lock=False gives the finish order, for comparison.
        pipeline = pipeline.update(V('stats', mode='e'), F(summary)(B.images), use_lock=None if ordered else False)
    if train:
        pipeline = pipeline.call(Trainer().step, B.images, B.labels, use_lock=True,
                                 save_to=V('loss', mode='a') if writes else None)
    (pipeline << dataset).run(BATCH_SIZE, n_iters=n_batches, prefetch=prefetch)


def timed(work: Callable[[], None]) -> tuple[float, float]:
    """Wall seconds of ``work()`` and the cores it kept busy."""
    start, cpu = time.perf_counter(), time.process_time()
    work()
    wall = time.perf_counter() - start
    return wall, (time.process_time() - cpu) / wall


def abba(slow: Callable[[], None], fast: Callable[[], None], rounds: int) -> tuple[float, float]:
    """Median over ``rounds`` blocks (A B B A) of time(slow) / time(fast), and the median cores ``fast`` used."""
    ratios, cores = [], []
    for _ in range(rounds):
        a1, b1, b2, a2 = timed(slow), timed(fast), timed(fast), timed(slow)
        ratios.append((a1[0] + a2[0]) / (b1[0] + b2[0]))
        cores += [b1[1], b2[1]]
    return statistics.median(ratios), statistics.median(cores)


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

    return abba(lambda: work(n_batches), two_threads, rounds)[0]


def handoff_cost(n_items: int = 3000) -> None:
    """Microseconds the prefetcher adds per item when the work itself is nothing."""
    costs = []
    for size in (0, 1, 2, 4):
        start = time.perf_counter()
        for _ in Prefetcher(range(n_items), lambda seq, item: item, size):
            pass
        costs.append(f"size={size}: {(time.perf_counter() - start) / n_items * 1e6:.1f} us")
    print("prefetcher hand-off cost per item (no-op work): " + ', '.join(costs))


ARMS = {'preprocessing only': {'train': False},
        'preprocessing + training': {'train': True},
        'preprocessing + training + ordered writes': {'train': True, 'writes': True}}


def compare(name: str, slow: Callable[[], None], fast: Callable[[], None], rounds: int) -> None:
    ratio, cores = abba(slow, fast, rounds)
    print(f"  {name:44s} {ratio:5.2f}x   ({cores:4.2f} cores busy)")


def main(n_batches: int = 40, rounds: int = 5) -> None:
    dataset = make_dataset(BATCH_SIZE * 8)
    print(f"torch threads per kernel: {torch.get_num_threads()}; "
          f"2 bare threads vs 1 on the preprocessing: {thread_ceiling(dataset, n_batches, rounds):.2f}x "
          "(the ceiling for prefetch on this machine now)")
    for title, options in ARMS.items():
        def run(prefetch: int, ordered: bool = True, options: dict = options) -> Callable[[], None]:
            return lambda: pipeline_run(dataset, n_batches, prefetch=prefetch, ordered=ordered, **options)
        hand = lambda options=options: hand_loop(dataset, n_batches, **options)  # noqa: E731
        for work in (hand, run(0), run(2)):                  # warm-up: first calls allocate and load kernels
            work()
        print(f"\n{title} ({n_batches} batches of {BATCH_SIZE}; median of {rounds} ABBA blocks; time ratio)")
        for prefetch in (2, 4):
            compare(f'prefetch={prefetch} vs prefetch=0', run(0), run(prefetch), rounds)
        compare('prefetch=2 vs the hand-written loop', hand, run(2), rounds)
        if options.get('writes'):
            compare('prefetch=2: ordered vs finish-order writes', run(2, ordered=False), run(2), rounds)
    print()
    handoff_cost()
    print("targets on 2 cores: preprocessing only >= 1.6x vs prefetch=0; "
          "preprocessing + training (with or without ordered writes) >= 1.3x vs the hand-written loop")


if __name__ == '__main__':
    main(*(int(arg) for arg in sys.argv[1:3]))
