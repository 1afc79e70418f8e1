"""Training overhead of a flowpipe pipeline against a hand-written PyTorch loop.

Both sides train the same small CNN (``SimpleCNNNetwork``, Adam, cross-entropy) on the shipped Digits images,
resized to 32x32 with the same antialiased bilinear ``F.interpolate`` call, one batch at a time, in one thread
(no prefetch: this measures the framework's per-batch cost, not overlap). The two are timed alternately, block by
block, so drifts in machine load hit both; the script prints the median ms per iteration and the ratio
flowpipe / raw (target: at most 1.05).

Run: ``python bench/train_overhead.py [--iters 30] [--repeats 5] [--batch-sizes 32 128]``
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

import flowpipe.pipeline.model_actions  # noqa: F401  (registers the model actions)
from flowpipe import B, Pipeline
from flowpipe.models.torch import SimpleCNN
from flowpipe.models.torch.networks import SimpleCNNNetwork
from flowpipe.opensets import Digits

SHAPE, CLASSES = (1, 32, 32), 10


def flowpipe_block(dataset, model, batch_size: int, iters: int, seed: int) -> float:
    """Seconds per iteration of a pipeline run of ``iters`` batches."""
    pipeline = (Pipeline().import_model('net', model).resize((32, 32)).to_array()
                .train_model('net', images=B.images, labels=B.labels)) << dataset
    start = time.perf_counter()
    pipeline.run(batch_size, n_iters=iters, shuffle=seed, drop_last=True)
    return (time.perf_counter() - start) / iters


def raw_block(images: np.ndarray, labels: np.ndarray, network, optimizer, batch_size: int, iters: int,
              seed: int) -> float:
    """Seconds per iteration of the same work written by hand."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    start = time.perf_counter()
    network.train()
    for step in range(iters):
        at = (step * batch_size) % (len(labels) - batch_size + 1)
        index = order[at:at + batch_size]
        batch = torch.from_numpy(images[index]).permute(0, 3, 1, 2)
        batch = F.interpolate(batch, size=(32, 32), mode='bilinear', align_corners=False, antialias=True)
        target = torch.from_numpy(labels[index])
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(network(batch.float()), target)
        loss.backward()
        optimizer.step()
    return (time.perf_counter() - start) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=30)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--batch-sizes', type=int, nargs='+', default=[32, 128])
    args = parser.parse_args()

    dataset = Digits().train
    whole = dataset.next_batch(len(dataset), n_epochs=1)
    images, labels = np.ascontiguousarray(whole.images), np.asarray(whole.labels)
    torch.manual_seed(0)
    model = SimpleCNN({'inputs/images/shape': SHAPE, 'inputs/labels/classes': CLASSES, 'device': 'cpu'})
    network = SimpleCNNNetwork(SHAPE, CLASSES)
    optimizer = torch.optim.Adam(network.parameters())
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, {args.iters} iterations per block, '
          f'{args.repeats} blocks each, alternating')
    print(f"{'batch':>6} {'flowpipe ms/iter':>17} {'raw ms/iter':>12} {'ratio':>7}")
    for batch_size in args.batch_sizes:
        flowpipe_block(dataset, model, batch_size, 3, 0)  # warm-up: kernels, allocator
        raw_block(images, labels, network, optimizer, batch_size, 3, 0)
        ours, raw = [], []
        for repeat in range(args.repeats):
            ours.append(flowpipe_block(dataset, model, batch_size, args.iters, repeat))
            raw.append(raw_block(images, labels, network, optimizer, batch_size, args.iters, repeat))
        ours_ms, raw_ms = 1000 * statistics.median(ours), 1000 * statistics.median(raw)
        print(f'{batch_size:>6} {ours_ms:>17.2f} {raw_ms:>12.2f} {ours_ms / raw_ms:>7.3f}')


if __name__ == '__main__':
    main()
