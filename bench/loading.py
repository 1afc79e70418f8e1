"""Loading image files: flowpipe's pipeline against torch's ``DataLoader`` on the same folder of JPEGs.

The folder (made here, in a temporary directory, with Pillow: 640 seeded random JPEGs whose shorter side is 320
and longer side 320 to 480) is read in batches of 64, each image resized to 224 x 224, flipped left-right at
random and made a float CHW tensor / 255:

- torch: ``DataLoader(dataset, batch_size=64, num_workers=N, persistent_workers=True)`` whose ``Dataset``
  decodes one file with Pillow, resizes it with Pillow (bilinear), flips it and converts it (the usual recipe);
- flowpipe: ``load() -> resize((224, 224)) -> flip(p=0.5) -> to_array() -> multiply(1 / 255)`` run with
  ``prefetch=2`` and ``prefetch=4`` (threads: the files of a batch decode in parallel in one decode pool) and
  with ``prefetch=2, target='processes'``.

A last line times the opt-in ``load(draft=(224, 224))`` (JPEG DCT scaling) against the full decode, both followed
by ``resize((224, 224))``, on another folder of JPEGs of 640 x 480, at least twice the target on both sides (on the
first folder, under twice the target, ``draft`` changes nothing).

Each arm reads 3 epochs per timing (one ``run(n_epochs=3)``; the DataLoader's workers are started before the
timings and persist, and so do flowpipe's worker processes, started by an untimed first run and kept by the
pipeline). Every ratio is measured in this process in
alternating blocks (A B B A: DataLoader, flowpipe, flowpipe, DataLoader), ``rounds`` times, with one torch thread
per process; the median of the per-block ratios (images per second of flowpipe / of the DataLoader) is printed.
Run: ``.venv/bin/python bench/loading.py [--workers N] [--rounds R] [--quick]``.

Targets (``--workers 2``): flowpipe's best threads arm >= 1.1x the DataLoader; ``target='processes'`` >= 0.9x.
"""
import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np
import torch
from PIL import Image

from flowpipe import ImagesBatch
from flowpipe.data import Dataset, FilesIndex
from flowpipe.pipeline import Pipeline

torch.set_num_threads(1)

BATCH_SIZE, SIZE, EPOCHS = 64, 224, 3


def make_folder(folder: str, n_files: int, seed: int = 0, size: tuple[int, int] | None = None) -> None:
    """``n_files`` JPEGs of 320 x 320..480 (either orientation; or all of ``size``): smooth random shapes plus
    grain, quality 90."""
    rng = np.random.default_rng(seed)
    for i in range(n_files):
        long = int(rng.integers(320, 481))
        width, height = size or ((long, 320) if rng.random() < 0.5 else (320, long))
        coarse = rng.integers(0, 256, (height // 20 + 2, width // 20 + 2, 3), dtype=np.uint8)
        image = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), dtype=np.int16)
        image = np.clip(image + rng.integers(-12, 13, image.shape), 0, 255).astype(np.uint8)
        Image.fromarray(image).save(os.path.join(folder, f'{i:04d}.jpg'), quality=90)


class PillowFiles(torch.utils.data.Dataset):
    """One image per item, the way a torch pipeline usually reads files: decode, resize, flip, to float CHW."""

    def __init__(self, files: list[str]):
        self.files = files

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> torch.Tensor:
        with Image.open(self.files[i]) as image:
            image = image.convert('RGB').resize((SIZE, SIZE), Image.BILINEAR)
        if torch.rand(()) < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(image)).permute(2, 0, 1).float().div(255)


def torch_epochs(loader: torch.utils.data.DataLoader) -> Callable[[], None]:
    def work() -> None:
        for _ in range(EPOCHS):
            for batch in loader:
                assert batch.shape[1:] == (3, SIZE, SIZE)
    return work


def flowpipe_epochs(dataset: Dataset, epochs: int = EPOCHS, draft: tuple[int, int] | None = None,
                    **options) -> Callable[[], None]:
    # bound once: the pipeline keeps its worker processes (target='processes') from one run to the next
    pipeline = Pipeline().load(draft=draft).resize((SIZE, SIZE)).flip(p=0.5).to_array().multiply(1 / 255) << dataset

    def work() -> None:
        pipeline.run(BATCH_SIZE, n_epochs=epochs, shuffle=False, seed=0, **options)
    return work


def draft_ratio(n_files: int, rounds: int) -> float:
    """Median ABBA ratio of the full decode's time to ``draft=(224, 224)``'s, on JPEGs of 640 x 480."""
    with tempfile.TemporaryDirectory() as folder:
        make_folder(folder, n_files, seed=1, size=(640, 480))
        dataset = Dataset(FilesIndex(path=os.path.join(folder, '*.jpg')), batch_class=ImagesBatch)
        full, drafted = (flowpipe_epochs(dataset, 1, draft, prefetch=2) for draft in (None, (SIZE, SIZE)))
        full(), drafted()
        return abba(full, drafted, rounds)[0]


def timed(work: Callable[[], None]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def abba(slow: Callable[[], None], fast: Callable[[], None], rounds: int,
         slow_times: list[float] | None = None) -> tuple[float, list[float]]:
    """Median over ``rounds`` blocks (A B B A) of time(slow) / time(fast), and every time of ``fast`` (those of
    ``slow`` are added to ``slow_times``)."""
    ratios, fast_times = [], []
    for _ in range(rounds):
        a1, b1, b2, a2 = timed(slow), timed(fast), timed(fast), timed(slow)
        ratios.append((a1 + a2) / (b1 + b2))
        fast_times += [b1, b2]
        if slow_times is not None:
            slow_times += [a1, a2]
    return statistics.median(ratios), fast_times


def main(workers: int, rounds: int, n_files: int) -> None:
    print(f"cores: {os.cpu_count()} (load average {os.getloadavg()[0]:.2f}: other work on the machine slows "
          f"both sides alike within a block); torch threads per process: {torch.get_num_threads()}")
    with tempfile.TemporaryDirectory() as folder:
        make_folder(folder, n_files)
        files = sorted(os.path.join(folder, name) for name in os.listdir(folder))
        loader = torch.utils.data.DataLoader(PillowFiles(files), batch_size=BATCH_SIZE, num_workers=workers,
                                             persistent_workers=workers > 0)
        dataset = Dataset(FilesIndex(path=os.path.join(folder, '*.jpg')), batch_class=ImagesBatch)
        arms = {'prefetch=2 (threads)': {'prefetch': 2}, 'prefetch=4 (threads)': {'prefetch': 4},
                "prefetch=2, target='processes'": {'prefetch': 2, 'target': 'processes'}}
        images = EPOCHS * n_files
        reference, reference_times = torch_epochs(loader), []
        reference()                                         # warm-up: starts the workers, fills the file cache
        print(f"{n_files} JPEGs, batches of {BATCH_SIZE}, {EPOCHS} epochs per timing, median of {rounds} ABBA "
              f"blocks against DataLoader(num_workers={workers}); images per second are medians over the timings")
        for name, options in arms.items():
            work = flowpipe_epochs(dataset, **options)
            work()
            ratio, times = abba(reference, work, rounds, reference_times)
            print(f"  flowpipe {name:32s} {images / statistics.median(times):6.0f} images/s   "
                  f"{ratio:5.2f}x the DataLoader")
        print(f"  DataLoader(num_workers={workers}){'':19s} {images / statistics.median(reference_times):6.0f} "
              f"images/s")
        del loader
    print(f"load(draft=(224, 224)) vs the full decode, {n_files} JPEGs of 640 x 480, prefetch=2: "
          f"{draft_ratio(n_files, rounds):.2f}x faster")
    print("targets with --workers 2: best threads arm >= 1.1x the DataLoader, target='processes' >= 0.9x")


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--workers', type=int, default=os.cpu_count() or 1, help="the DataLoader's num_workers")
    parser.add_argument('--rounds', type=int, default=5, help='ABBA blocks per arm')
    parser.add_argument('--quick', action='store_true', help='a smoke run: 192 files, one block per arm')
    args = parser.parse_args()
    main(args.workers, 1 if args.quick else args.rounds, 192 if args.quick else 640)
