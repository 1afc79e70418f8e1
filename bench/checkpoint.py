"""What checkpoints cost: one checkpoint of ResNet18 against one training step, and ``every=1`` over an epoch.

1. *Write vs step*: a pipeline trains ``ResNet18`` (Adam, float32) on small images; alternating blocks (ABBA) time
   ``--steps`` training steps (``model.train`` on one batch) and ``--writes`` checkpoint writes of the same
   pipeline (models, optimizer, variables, random states: what ``run(checkpoint=...)`` writes after a batch,
   fsync included). Printed: the median ms of each and the median of the per-block ratios write / step.
2. *An epoch*: ``run(...)`` over the dataset with ``checkpoint=Checkpoint(folder, every=1)`` against the same run
   without a checkpoint, ABBA blocks of one epoch each (each run starts from a fresh pipeline built with the same
   seed); printed: the median seconds per epoch of each and the median of the per-block ratios.
3. *The signal check*: a cheap pipeline (one variable update per batch, ``--signal-batches`` batches of one item)
   run with ``Checkpoint(folder, every=10**9)`` (one write, at the end) with ``on_interrupt=True`` (SIGTERM,
   SIGUSR1 and Ctrl-C handlers installed for the run, the flag read after every batch) against
   ``on_interrupt=False`` (neither), ABBA blocks of one run each; printed: the median ms per run and the median of
   the per-block ratios. In one process the check is a read of a list.
4. *The stop agreement under ranks* (``--ranks 2``, 0 to skip): the same runs in a 2-rank gloo job (``launch``),
   where ``on_interrupt=True`` adds one ``all_reduce`` of two integers per batch, as these batches train no model
   (``every=``; with ``seconds=`` it replaces the broadcast of the clock); rank 0's ABBA timings are printed, with
   ``--rank-batches`` batches per run.
5. *The same under ranks with a training step*: each batch (2 items, one a rank) trains a tiny linear model, whose
   exchange of item counts carries the flag: no collective more; the same ABBA blocks in the same job.

Fixed torch threads (``--threads``, 1 by default), the checkpoint folder in a temporary directory (the disk the
system's temporary files are on). Small inputs so that it runs in a minute or two on two shared cores.

Run: ``python bench/checkpoint.py [--size 32] [--batch 8] [--batches 4] [--blocks 4] [--steps 3] [--writes 2]
[--signal-batches 4000] [--signal-blocks 10] [--ranks 2] [--rank-batches 400]``
"""
from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import tempfile
import time

import numpy as np
import torch

from flowpipe import B, Checkpoint, Dataset, Pipeline, V
from flowpipe.execution.nodes import IndexSource
from flowpipe.execution.resume import RunCheckpoints
from flowpipe.execution.run import RunArgs
from flowpipe.models.torch import ResNet18


def dataset(items: int, size: int) -> Dataset:
    rng = np.random.default_rng(0)
    images = rng.random((items, 3, size, size), dtype=np.float32)
    return Dataset(items, preloaded={'images': images, 'labels': rng.integers(0, 10, items)})


def pipeline(data: Dataset, size: int) -> Pipeline:
    config = {'inputs/images/shape': (3, size, size), 'inputs/labels/classes': 10, 'initial_block/inputs': 'images',
              'optimizer': 'Adam'}
    return (Pipeline().init_variable('loss', []).init_model('net', ResNet18, config=config)
            .train_model('net', images=B.images, labels=B.labels, fetches='loss', save_to=V('loss', mode='a'))
            ) << data


def write_vs_step(data: Dataset, args: argparse.Namespace, folder: str) -> None:
    trained = pipeline(data, args.size).run(args.batch, n_iters=2, seed=0)       # a model with optimizer state
    model = trained.m('net')
    images, labels = data.preloaded['images'][:args.batch], data.preloaded['labels'][:args.batch]
    run = RunArgs(batch_size=args.batch, n_iters=2, seed=0, checkpoint=Checkpoint(folder, keep=1))
    checkpoints = RunCheckpoints(trained, run)
    node = IndexSource(lambda: iter(()))                    # the run's position: a node with nothing drawn

    def step() -> None:
        model.train(images=images, labels=labels)

    def write() -> None:
        checkpoints.done += 1
        checkpoints.write(node, (0, True))

    times = {'step': [], 'write': []}
    ratios = []
    for block in range(args.blocks):
        order = ('step', 'write') if block % 2 == 0 else ('write', 'step')
        measured = {}
        for name in order:
            repeats = args.steps if name == 'step' else args.writes
            start = time.perf_counter()
            for _ in range(repeats):
                (step if name == 'step' else write)()
            measured[name] = (time.perf_counter() - start) / repeats
            times[name].append(measured[name])
        ratios.append(measured['write'] / measured['step'])
    size_mb = sum(p.numel() * p.element_size() for p in model.model.parameters()) / 2 ** 20
    print(f"ResNet18 ({size_mb:.0f} MB of float32 weights, Adam), batch {args.batch} of 3x{args.size}x{args.size}: "
          f"step {1e3 * statistics.median(times['step']):.0f} ms, checkpoint write "
          f"{1e3 * statistics.median(times['write']):.0f} ms, write / step {statistics.median(ratios):.2f} "
          f"(median of {args.blocks} ABBA blocks)")
    checkpoints.close()                                     # the folder is free for the next measure
    model.close()


def epoch(data: Dataset, args: argparse.Namespace, folder: str | None) -> float:
    run = pipeline(data, args.size)
    checkpoint = None if folder is None else Checkpoint(folder, every=1)
    start = time.perf_counter()
    run.run(args.batch, n_epochs=1, seed=0, checkpoint=checkpoint)
    elapsed = time.perf_counter() - start
    run.m('net').close()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    return elapsed


def every_one_vs_none(data: Dataset, args: argparse.Namespace, folder: str) -> None:
    epoch(data, args, None)                                 # warm-up: allocator, kernels
    times = {'none': [], 'every=1': []}
    ratios = []
    for block in range(args.blocks):
        order = ('none', 'every=1') if block % 2 == 0 else ('every=1', 'none')
        measured = {name: epoch(data, args, None if name == 'none' else folder) for name in order}
        for name, value in measured.items():
            times[name].append(value)
        ratios.append(measured['every=1'] / measured['none'])
    print(f"one epoch of {args.batches} batches: no checkpoint {statistics.median(times['none']):.2f} s, "
          f"checkpoint every batch {statistics.median(times['every=1']):.2f} s, ratio "
          f"{statistics.median(ratios):.2f} (median of {args.blocks} ABBA blocks)")


def _cheap(batches: int, trains: bool) -> tuple[Pipeline, int]:
    """A pipeline of ``batches`` batches that updates a variable, or (``trains``) trains a tiny linear model on
    2 items a batch; its batch size."""
    if not trains:
        return Pipeline().init_variable('count', 0).update(V('count'), V('count') + 1) << Dataset(batches), 1
    rng = np.random.default_rng(0)
    data = Dataset(2 * batches, preloaded={'x': rng.normal(size=(2 * batches, 4)).astype(np.float32),
                                           'y': rng.integers(0, 2, 2 * batches)})
    config = {'model': torch.nn.Linear(4, 2), 'inputs/x/shape': (4,), 'inputs/y/classes': 2, 'loss': 'ce',
              'optimizer': {'name': 'SGD', 'lr': 0.01}}
    return Pipeline().init_model('net', config=config).train_model('net', x=B.x, y=B.y) << data, 2


def _signal_blocks(batches: int, blocks: int, folder: str, trains: bool = False) -> tuple[dict, list]:
    """ABBA timings of runs of ``batches`` cheap batches (``_cheap``) with and without the stop signals'
    handling."""
    cheap, size = _cheap(batches, trains)
    runs = itertools.count()

    def one_run(on_interrupt: bool) -> float:
        own = os.path.join(folder, str(next(runs)))        # a fresh folder each (the same on every rank)
        start = time.perf_counter()
        cheap.run(size, n_epochs=1, checkpoint=Checkpoint(own, every=10 ** 9, on_interrupt=on_interrupt))
        return time.perf_counter() - start

    one_run(True)                                           # warm-up
    times = {'checked': [], 'unchecked': []}
    ratios = []
    for block in range(blocks):
        order = ('checked', 'unchecked') if block % 2 == 0 else ('unchecked', 'checked')
        measured = {name: one_run(name == 'checked') for name in order}
        for name, value in measured.items():
            times[name].append(value)
        ratios.append(measured['checked'] / measured['unchecked'])
    return times, ratios


def _print_signal_blocks(what: str, batches: int, times: dict, ratios: list, trains: bool = False) -> None:
    each = 'two-item batches (a training step of a tiny model each)' if trains else \
        'one-item batches (one variable update each)'
    print(f"{what}: a run of {batches} {each} with the signal handlers and "
          f"the per-batch check {1e3 * statistics.median(times['checked']):.1f} ms, without "
          f"{1e3 * statistics.median(times['unchecked']):.1f} ms, ratio {statistics.median(ratios):.3f} "
          f"(median of {len(ratios)} ABBA blocks)")


def signal_check(args: argparse.Namespace, folder: str) -> None:
    times, ratios = _signal_blocks(args.signal_batches, args.signal_blocks, folder)
    _print_signal_blocks('one process', args.signal_batches, times, ratios)


def _rank_blocks(batches: int, blocks: int, folder: str, threads: int) -> list[tuple[dict, list]]:
    """The ABBA timings of runs without and with a training step, in one job."""
    torch.set_num_threads(threads)
    return [_signal_blocks(batches, blocks, os.path.join(folder, str(trains)), trains) for trains in (False, True)]


def signal_check_ranks(args: argparse.Namespace, folder: str) -> None:
    from flowpipe.parallel import launch
    measured = launch(_rank_blocks, args.ranks, args=(args.rank_batches, args.signal_blocks, folder, args.threads),
                      timeout=3600)[0]
    for trains, (times, ratios) in zip((False, True), measured):
        _print_signal_blocks(f'{args.ranks} gloo ranks, rank 0', args.rank_batches, times, ratios, trains)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size', type=int, default=32, help='image side')
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--batches', type=int, default=4, help='batches per epoch')
    parser.add_argument('--blocks', type=int, default=4)
    parser.add_argument('--steps', type=int, default=3, help='training steps per block')
    parser.add_argument('--writes', type=int, default=2, help='checkpoint writes per block')
    parser.add_argument('--signal-batches', type=int, default=4000, help='batches of the signal check runs')
    parser.add_argument('--signal-blocks', type=int, default=10)
    parser.add_argument('--ranks', type=int, default=2, help='ranks of the agreement check (0: skip it)')
    parser.add_argument('--rank-batches', type=int, default=400, help='batches of its runs')
    parser.add_argument('--threads', type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    data = dataset(args.batch * args.batches, args.size)
    root = tempfile.mkdtemp(prefix='flowpipe-bench-')
    try:
        write_vs_step(data, args, f'{root}/write')
        every_one_vs_none(data, args, f'{root}/epoch')
        signal_check(args, f'{root}/signals')
        if args.ranks > 1:
            signal_check_ranks(args, f'{root}/ranks')
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
    main()
