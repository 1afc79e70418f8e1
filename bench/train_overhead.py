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
drift in machine load hits both alike); the script prints the median ms per iteration of each and the ratio flowpipe
/ raw (target: at most 1.05).

Run: ``python bench/train_overhead.py [--iters 20] [--repeats 8] [--batch-sizes 32 128] [--threads 1]``
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


def flowpipe_block(pipeline: Pipeline, batch_size: int, iters: int, seed: int) -> float:
    """Seconds per iteration of a pipeline run of ``iters`` batches."""
    start = time.perf_counter()
    pipeline.run(batch_size, n_iters=iters, shuffle=seed, drop_last=True)
    return (time.perf_counter() - start) / iters


def hand_preprocess(images: np.ndarray) -> torch.Tensor:
    """What ``resize((32, 32)).to_array()`` computes, written by hand: NHWC uint8 -> NCHW float32, 32x32, with
    row-major strides, converted and laid out in one copy."""
    batch = torch.from_numpy(images).permute(0, 3, 1, 2)
    batch = F.interpolate(batch, size=(32, 32), mode='bilinear', align_corners=False, antialias=True)
    out = np.empty(tuple(batch.shape), dtype=np.float32)
    np.copyto(out, batch.numpy(), casting='unsafe')
    return torch.from_numpy(out)


def raw_block(images: np.ndarray, labels: np.ndarray, network, optimizer, batch_size: int, iters: int,
              seed: int) -> float:
    """Seconds per iteration of the same work written by hand."""
    start = time.perf_counter()
    order = np.random.default_rng(seed).permutation(len(labels))
    network.train()
    for step in range(iters):
        at = (step * batch_size) % (len(labels) - batch_size + 1)
        index = order[at:at + batch_size]
        batch, target = hand_preprocess(images[index]), torch.from_numpy(labels[index])
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(network(batch), target)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / iters


def measure(dataset, images, labels, batch_size: int, iters: int, repeats: int) -> tuple[float, float]:
    """Median seconds per iteration of the flowpipe and the raw arm, blocks alternating ABBA."""
    model = SimpleCNN({'inputs/images/shape': SHAPE, 'inputs/labels/classes': CLASSES, 'device': 'cpu'})
    network = SimpleCNNNetwork(SHAPE, CLASSES)
    network.load_state_dict(model.model.state_dict())
    optimizer = torch.optim.Adam(network.parameters())
    pipeline = (Pipeline().import_model('net', model).resize((32, 32)).to_array()
                .train_model('net', images=B.images, labels=B.labels)) << dataset
    arms = {'flowpipe': lambda n, seed: flowpipe_block(pipeline, batch_size, n, seed),
            'raw': lambda n, seed: raw_block(images, labels, network, optimizer, batch_size, n, seed)}
    for arm in arms.values():
        arm(3, 0)  # warm-up: kernels, allocator, optimizer state
    times: dict[str, list[float]] = {name: [] for name in arms}
    for repeat in range(repeats):
        for name in (('flowpipe', 'raw') if repeat % 2 == 0 else ('raw', 'flowpipe')):
            times[name].append(arms[name](iters, repeat))
    model.close()
    return statistics.median(times['flowpipe']), statistics.median(times['raw'])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=20)
    parser.add_argument('--repeats', type=int, default=8)
    parser.add_argument('--batch-sizes', type=int, nargs='+', default=[32, 128])
    parser.add_argument('--threads', type=int, default=1, help='torch threads of both arms (default 1: a busy '
                        'machine delays multi-threaded kernels by whole time slices, which swamps the overhead)')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    dataset = Digits().train
    whole = dataset.next_batch(len(dataset), n_epochs=1)
    images, labels = np.ascontiguousarray(whole.images), np.asarray(whole.labels)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, {args.iters} iterations per block, '
          f'{args.repeats} blocks each, alternating')
    print(f"{'batch':>6} {'flowpipe ms/iter':>17} {'raw ms/iter':>12} {'ratio':>7}")
    for batch_size in args.batch_sizes:
        ours, raw = measure(dataset, images, labels, batch_size, args.iters, args.repeats)
        print(f'{batch_size:>6} {1000 * ours:>17.2f} {1000 * raw:>12.2f} {ours / raw:>7.3f}')


if __name__ == '__main__':
    main()
