"""Training overhead of a flowpipe pipeline against a hand-written PyTorch loop.

Both arms do the same work per batch: take a shuffled batch of the shipped Digits images (uint8, 8x8), resize it to
32x32 with the same antialiased bilinear ``F.interpolate`` call on uint8, turn it into a float32 ``(N, C, H, W)``
array with row-major strides (the numpy round trip that ``resize().to_array()`` makes), and make one Adam step of
the same small CNN (``SimpleCNNNetwork``, starting from the same weights) on cross-entropy. Neither arm fetches the
loss. Both run in one thread of Python with the same torch thread count (``--threads``), no prefetch: this measures
the framework's per-batch cost, not overlap. Both arms hand the network the same strides: for these one-channel
images ``np.ascontiguousarray(np.moveaxis(...))`` would keep the strides of the NHWC array, which torch reads as
channels-last, and oneDNN's NHWC kernels make this network about 1.4 times faster (``bench/speed.py``'s ``naive
.contiguous()`` arm): a layout, not the framework's cost. The arms are timed in alternating blocks (ABBA order, so a
drift in machine load hits both alike); the script prints the median ms per iteration of each and the median of the
per-block ratios flowpipe / raw (each block of one arm against the other arm's block beside it: a load change
between blocks moves one ratio, not the median). Targets at batch 32: at most 1.03 without micro-batches, 1.06 with
micro-batches of 8 (``--microbatch 8``: the model's ``'microbatch': 8`` against a hand loop that accumulates the
summed losses of micro-batches of 8 divided by the batch size, then steps once).

``--clock cpu`` times the blocks by the process's CPU time instead of the wall clock: on a shared machine the time
the process spends descheduled then counts in neither arm (both arms run in this one thread).

Run: ``python bench/train_overhead.py [--iters 20] [--repeats 8] [--batch-sizes 32 128] [--threads 1]
[--microbatch 8] [--clock wall|cpu]``
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from flowpipe import B, Pipeline
from flowpipe.models.torch import SimpleCNN
from flowpipe.models.torch.networks import SimpleCNNNetwork
from flowpipe.opensets import Digits

SHAPE, CLASSES = (1, 32, 32), 10
#: the clocks of ``--clock``: wall time, or the CPU time of the process
CLOCKS = {'wall': time.perf_counter, 'cpu': time.process_time}


def flowpipe_block(pipeline: Pipeline, batch_size: int, iters: int, seed: int, clock=time.perf_counter) -> float:
    """Seconds per iteration of a pipeline run of ``iters`` batches."""
    start = clock()
    pipeline.run(batch_size, n_iters=iters, shuffle=seed, drop_last=True)
    return (clock() - start) / iters


def hand_preprocess(images: np.ndarray) -> torch.Tensor:
    """What ``resize((32, 32)).to_array()`` computes, written by hand: NHWC uint8 -> NCHW float32, 32x32, with
    row-major strides, converted and laid out in one copy."""
    batch = torch.from_numpy(images).permute(0, 3, 1, 2)
    batch = F.interpolate(batch, size=(32, 32), mode='bilinear', align_corners=False, antialias=True)
    out = np.empty(tuple(batch.shape), dtype=np.float32)
    np.copyto(out, batch.numpy(), casting='unsafe')
    return torch.from_numpy(out)


def raw_block(images: np.ndarray, labels: np.ndarray, network, optimizer, batch_size: int, iters: int,
              seed: int, microbatch: int | None = None, clock=time.perf_counter) -> float:
    """Seconds per iteration of the same work written by hand (gradients accumulated over micro-batches of
    ``microbatch`` items, each summed loss divided by the batch size, when given)."""
    start = clock()
    order = np.random.default_rng(seed).permutation(len(labels))
    network.train()
    for step in range(iters):
        at = (step * batch_size) % (len(labels) - batch_size + 1)
        index = order[at:at + batch_size]
        batch, target = hand_preprocess(images[index]), torch.from_numpy(labels[index])
        optimizer.zero_grad(set_to_none=True)
        if microbatch is None:
            F.cross_entropy(network(batch), target).backward()
        else:
            for start_item in range(0, batch_size, microbatch):
                piece = slice(start_item, start_item + microbatch)
                (F.cross_entropy(network(batch[piece]), target[piece], reduction='sum') / batch_size).backward()
        optimizer.step()
    return (clock() - start) / iters


def measure(dataset, images, labels, batch_size: int, iters: int, repeats: int,
            microbatch: int | None = None, clock=time.perf_counter) -> tuple[float, float, float]:
    """Median seconds per iteration of the flowpipe and the raw arm, blocks alternating ABBA, and the median of the
    per-block ratios."""
    model = SimpleCNN({'inputs/images/shape': SHAPE, 'inputs/labels/classes': CLASSES, 'device': 'cpu',
                       'microbatch': microbatch})
    network = SimpleCNNNetwork(SHAPE, CLASSES)
    network.load_state_dict(model.model.state_dict())
    optimizer = torch.optim.Adam(network.parameters())
    pipeline = (Pipeline().import_model('net', model).resize((32, 32)).to_array()
                .train_model('net', images=B.images, labels=B.labels)) << dataset
    arms = {'flowpipe': lambda n, seed: flowpipe_block(pipeline, batch_size, n, seed, clock),
            'raw': lambda n, seed: raw_block(images, labels, network, optimizer, batch_size, n, seed, microbatch,
                                             clock)}
    for arm in arms.values():
        arm(3, 0)  # warm-up: kernels, allocator, optimizer state
    times: dict[str, list[float]] = {name: [] for name in arms}
    for repeat in range(repeats):
        for name in (('flowpipe', 'raw') if repeat % 2 == 0 else ('raw', 'flowpipe')):
            times[name].append(arms[name](iters, repeat))
    model.close()
    ratios = [ours / raw for ours, raw in zip(times['flowpipe'], times['raw'])]
    return statistics.median(times['flowpipe']), statistics.median(times['raw']), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=20)
    parser.add_argument('--repeats', type=int, default=8)
    parser.add_argument('--batch-sizes', type=int, nargs='+', default=[32, 128])
    parser.add_argument('--threads', type=int, default=1, help='torch threads of both arms (default 1: a busy '
                        'machine delays multi-threaded kernels by whole time slices, which swamps the overhead)')
    parser.add_argument('--microbatch', type=int, nargs='+', default=[0],
                        help="micro-batch sizes to measure, 0 for none (e.g. --microbatch 0 8)")
    parser.add_argument('--clock', choices=('wall', 'cpu'), default='wall',
                        help="time the blocks by the wall clock (default) or by the process's CPU time (on a shared "
                             "machine the time spent descheduled does not count; with one torch thread)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    dataset = Digits().train
    whole = dataset.next_batch(len(dataset), n_epochs=1)
    images, labels = np.ascontiguousarray(whole.images), np.asarray(whole.labels)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, {args.iters} iterations per block, '
          f'{args.repeats} blocks each, alternating, {args.clock} clock')
    print(f"{'batch':>6} {'microbatch':>10} {'flowpipe ms/iter':>17} {'raw ms/iter':>12} {'median ratio':>13}")
    for batch_size in args.batch_sizes:
        for microbatch in args.microbatch:
            ours, raw, ratio = measure(dataset, images, labels, batch_size, args.iters, args.repeats,
                                       microbatch or None, CLOCKS[args.clock])
            print(f"{batch_size:>6} {microbatch or '-':>10} {1000 * ours:>17.2f} {1000 * raw:>12.2f} {ratio:>13.3f}")


if __name__ == '__main__':
    main()
