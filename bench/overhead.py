"""Framework overhead per batch: a pipeline of 0, 5 and 10 trivial actions against the bare batch loop.

The bare loop draws the same sub-indices and creates the same batches by hand; what a pipeline adds on top
(seeds, contexts, the action walk, the run loop) is the overhead. Prints µs per batch and per action.
Run: ``.venv/bin/python bench/overhead.py [n_batches]``.
"""
import sys
import time

import numpy as np

from flowpipe.batch import Batch, action
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


if __name__ == '__main__':
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
