"""``target='processes'``: a pool started per run with pickled batches (the old way) vs the pipeline's kept pool
with batches in shared memory.

The workload is image-like: uint8 images (as decoded from files) are cropped and resized to 224, flipped, made
float CHW and divided by 255, 64 to a batch (38 MB of float32 per batch). A run processes ``n_batches`` and the
caller reads every batch (a sum over a strided view), as a training loop would.

- old: what ``target='processes'`` did before: a ``ProcessPoolExecutor`` ('spawn') made for the run, its
  initializer loading a dill copy of the first stage's runner, each batch dill-pickled back through the pipe;
- new: ``pipeline.gen_batch(..., prefetch=2, target='processes')``: the pipeline's worker processes, started once
  (before the timed blocks) and kept from run to run, each batch's arrays in shared memory;
- DataLoader: torch's ``DataLoader`` over a map-style dataset of whole batches (the same function of the same
  arrays), ``num_workers=2, persistent_workers=True, prefetch_factor=1``, its default start method.

All keep 2 batches in flight in 2 worker processes, with one torch thread per process (flowpipe's workers take the
caller's number, set to 1 here). Each ratio is the median
over ``rounds`` blocks (A B B A, in the same process) of time(other) / time(new): above 1, new is faster. Run:
``.venv/bin/python bench/processes.py [n_batches] [rounds]`` (under a minute with the defaults on 2 cores).
"""
import collections
import multiprocessing
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import dill
import numpy as np
import torch
import torch.nn.functional as TF

from flowpipe.batch import Batch, action
from flowpipe.data import Dataset
from flowpipe.execution.processes import InProcess
from flowpipe.execution.runner import BatchRunner
from flowpipe.execution.steps import compile_plan
from flowpipe.pipeline import Pipeline

torch.set_num_threads(1)

BATCH_SIZE, SOURCE, SIDE, WORKERS = 64, 256, 224, 2


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """Crop, resize to 224, flip horizontally, float CHW / 255."""
    x = torch.from_numpy(images[:, 8:-8, 8:-8]).permute(0, 3, 1, 2).float()
    x = TF.interpolate(x, size=(SIDE, SIDE), mode='bilinear', align_corners=False)
    return x.flip(-1).div_(255).contiguous()


class DecodedBatch(Batch):
    """uint8 HWC images, as decoded from image files."""
    components = ('images', 'labels')

    @action
    def to_tensor(self):
        self.images = to_tensor(self.images)
        return self


class Batches(torch.utils.data.Dataset):
    """The DataLoader's side: item ``i`` is batch ``i``, processed (``images``, ``labels``)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, n_batches: int):
        self.images, self.labels, self.n_batches = images, labels, n_batches

    def __len__(self) -> int:
        return self.n_batches

    def __getitem__(self, i: int) -> dict:
        positions = np.arange(i * BATCH_SIZE, (i + 1) * BATCH_SIZE) % len(self.images)
        return {'images': to_tensor(self.images[positions]), 'labels': torch.from_numpy(self.labels[positions])}


def _one_thread(worker_id: int) -> None:
    torch.set_num_threads(1)


def make_dataset(n_items: int) -> Dataset:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n_items, SOURCE, SOURCE, 3), dtype=np.uint8)
    return Dataset(n_items, batch_class=DecodedBatch, preloaded={'images': images, 'labels': np.arange(n_items)})


def consume(batch: Batch | dict) -> float:
    images = batch['images'] if isinstance(batch, dict) else batch.images
    return float(images[:, :, ::7, ::7].sum())


_PROCESS: Callable | None = None


def _init(payload: bytes) -> None:
    global _PROCESS
    _PROCESS = dill.loads(payload)


def _process(seq: int, index: object) -> bytes:
    return dill.dumps(_PROCESS(seq, index))


def old_run(pipeline: Pipeline, n_batches: int) -> None:
    """The old ``target='processes'`` path: a pool for the run, the runner in its initializer, pickled batches."""
    plan = compile_plan(pipeline.actions, DecodedBatch, None, BATCH_SIZE)
    # recurse=True, else this script's batch class would look its globals up in the worker's own `__main__`
    payload = dill.dumps(InProcess(BatchRunner(pipeline, plan.stages[0], 0)), recurse=True)
    indices = pipeline.dataset.index.gen_batch(BATCH_SIZE, False, n_batches, None, False, 0)
    with ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context('spawn'), initializer=_init,
                             initargs=(payload,)) as pool:
        in_flight: collections.deque = collections.deque()
        for seq, index in enumerate(indices):
            in_flight.append(pool.submit(_process, seq, index))
            if len(in_flight) == 2:
                consume(dill.loads(in_flight.popleft().result()))
        while in_flight:
            consume(dill.loads(in_flight.popleft().result()))


def new_run(pipeline: Pipeline, n_batches: int) -> None:
    for batch in pipeline.gen_batch(BATCH_SIZE, n_iters=n_batches, prefetch=2, workers=WORKERS, target='processes'):
        consume(batch)


def loader_run(loader: torch.utils.data.DataLoader) -> None:
    for batch in loader:
        consume(batch)


def timed(work: Callable[[], None]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def abba(name: str, other: Callable[[], None], new: Callable[[], None], rounds: int, n_images: int) -> None:
    """Print the median over ``rounds`` blocks (A B B A) of time(other) / time(new), and each side's images/s."""
    ratios, times = [], {name: [], 'new': []}
    for _ in range(rounds):
        a1, b1, b2, a2 = timed(other), timed(new), timed(new), timed(other)
        ratios.append((a1 + a2) / (b1 + b2))
        times[name] += [a1, a2]
        times['new'] += [b1, b2]
    rates = ', '.join(f"{side} {n_images / statistics.median(values):.0f}" for side, values in times.items())
    print(f"  {name} / new time: {statistics.median(ratios):.2f}x   (images/s: {rates})")


def main(n_batches: int = 6, rounds: int = 2) -> None:
    dataset = make_dataset(BATCH_SIZE * 4)
    pipeline = dataset.p.to_tensor()
    old, new = (lambda: old_run(pipeline, n_batches)), (lambda: new_run(pipeline, n_batches))
    loader = torch.utils.data.DataLoader(
        Batches(dataset.preloaded['images'], dataset.preloaded['labels'], n_batches), batch_size=None,
        num_workers=WORKERS, persistent_workers=True, prefetch_factor=1, worker_init_fn=_one_thread)
    first = timed(new)                  # the pipeline's workers start here, once
    loader_run(loader)                  # and the DataLoader's
    megabytes = BATCH_SIZE * 3 * SIDE * SIDE * 4 / 2 ** 20
    print(f"{n_batches} batches of {BATCH_SIZE} images -> {megabytes:.0f} MB float32 each; {WORKERS} workers, "
          f"2 batches in flight; first new run (workers start): {first:.2f} s; median of {rounds} ABBA blocks")
    abba('old', old, new, rounds, n_batches * BATCH_SIZE)
    abba('DataLoader', lambda: loader_run(loader), new, rounds, n_batches * BATCH_SIZE)
    pipeline.reset('iter')


if __name__ == '__main__':
    main(*(int(arg) for arg in sys.argv[1:3]))
