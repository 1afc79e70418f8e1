"""Framework overhead per batch: a pipeline of 0, 5 and 10 trivial actions against the bare batch loop, and what
run callbacks that do nothing per batch add.

The bare loop draws the same sub-indices and creates the same batches by hand; what a pipeline adds on top
(seeds, contexts, the action walk, the run loop) is the overhead. Prints µs per batch and per action.
Run: ``.venv/bin/python bench/overhead.py [n_batches]``.
"""
import sys
import time

import numpy as np

from flowpipe.batch import Batch, action
from flowpipe.callbacks import Callback
from flowpipe.data import Dataset

BATCH_SIZE = 64


class TrivialBatch(Batch):
    """A batch whose only action does nothing."""
    components = ('x',)

    @action
    def noop(self):
        return self


def bare_loop(dataset, n_batches):
    for index in dataset.index.gen_batch(BATCH_SIZE, n_iters=n_batches):
        dataset.create_batch(index)


def timed(func, *args, repeats=5):
    """Best of ``repeats`` wall-clock times of ``func(*args)``, in seconds."""
    best = float('inf')
    for _ in range(repeats):
        start = time.perf_counter()
        func(*args)
        best = min(best, time.perf_counter() - start)
    return best


def main(n_batches=2000):
    dataset = Dataset(BATCH_SIZE * 50, batch_class=TrivialBatch,
                      preloaded={'x': np.zeros((BATCH_SIZE * 50, 4), dtype='float32')})
    bare = timed(bare_loop, dataset, n_batches) / n_batches * 1e6
    print(f"bare loop (draw indices + create batch): {bare:7.1f} us per batch")
    base = None
    for n_actions in (0, 5, 10):
        pipeline = dataset.p
        for _ in range(n_actions):
            pipeline = pipeline.noop()
        total = timed(lambda: pipeline.run(BATCH_SIZE, n_iters=n_batches)) / n_batches * 1e6
        overhead = total - bare
        base = overhead if n_actions == 0 else base
        per_action = (overhead - base) / n_actions if n_actions else 0.0
        print(f"{n_actions:2d} actions: {total:7.1f} us per batch, overhead {overhead:6.1f} us per batch"
              + (f", {per_action:5.2f} us per action" if n_actions else ''))
    print("targets: <= 30 us per batch + <= 10 us per action")
    callbacks_arm(dataset, n_batches)


class EpochOnly(Callback):
    """A callback that listens to epoch ends only, and does nothing there."""

    def on_epoch_end(self, run, epoch):
        pass


def callbacks_arm(dataset, n_batches, pairs=5):
    """Five do-nothing callbacks against none, in ABAB pairs; the median difference per batch."""
    pipeline = dataset.p.noop()
    differences = []
    for _ in range(pairs):
        without = timed(lambda: pipeline.run(BATCH_SIZE, n_iters=n_batches))
        with_callbacks = timed(lambda: pipeline.run(BATCH_SIZE, n_iters=n_batches,
                                                    callbacks=[EpochOnly() for _ in range(5)]))
        differences.append((with_callbacks - without) / n_batches * 1e6)
    print(f"5 callbacks that do nothing per batch: {float(np.median(differences)):+5.2f} us per batch "
          f"(median of {pairs} pairs; target <= 1 us)")


if __name__ == '__main__':
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
