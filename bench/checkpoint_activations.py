"""What activation checkpointing saves and costs: a training step with ``'checkpoint_activations': True`` against the
same step without it, in one process.

Setting: an MLP whose activations outweigh its weights: ``--blocks`` blocks of (Linear 256->256, GELU, Linear
256->256, GELU), a stem Linear 64->256 and a head Linear 256->10, each block a top-level child (so ``True``
checkpoints each of them), float32, Adam, batch ``--batch`` (1024). Both arms are ``TorchModel``s built from the same
weights and train on the same batches with the same step seeds; their parameters are compared after the run (they
must be equal: checkpointing is exact).

Memory, per arm, one training step after a warm-up step:

- on a GPU: ``torch.cuda.max_memory_allocated()`` during the step minus ``memory_allocated()`` before it (the step's
  peak on top of the weights, gradients and optimizer state): the real peak, recomputation included;
- on the CPU (and on a GPU too): the live bytes autograd keeps for backward outside the recomputed modules, peak
  over the step (``torch.autograd.graph.saved_tensors_hooks``; parameters excluded, a shared storage once). What
  checkpointing keeps is the modules' inputs; during the backward of one checkpointed module its recomputed
  activations (one block's) come on top, which this count does not see: it is not the process's peak, only what the
  two arms keep across the forward.

Time: blocks of ``--steps`` steps in ABBA order (plain, checkpointed, checkpointed, plain) for ``--rounds`` rounds,
``--threads`` torch threads (fixed), synchronized around each block on a GPU; printed: each arm's median step time
and the median of the per-round ratios checkpointed / plain.

The device is ``--device`` (``auto``: CUDA where available, else the CPU; ``cuda`` refuses to run without a GPU).

Run: ``python bench/checkpoint_activations.py [--device auto] [--rounds 5] [--steps 5] [--threads 1]``.
"""
import argparse
import os
import statistics
import sys
import time
from collections import OrderedDict

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from microbatch_memory import SavedActivations  # noqa: E402 - the bench folder's own helper

from flowpipe.models.torch import TorchModel  # noqa: E402

FEATURES, WIDTH, CLASSES = 64, 256, 10


def network(blocks):
    torch.manual_seed(0)
    children = [('stem', nn.Linear(FEATURES, WIDTH))]
    children += [(f'block{i}', nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH), nn.GELU()))
                 for i in range(blocks)]
    children.append(('head', nn.Linear(WIDTH, CLASSES)))
    return nn.Sequential(OrderedDict(children))


def model(blocks, device, checkpoint):
    return TorchModel({'model': network(blocks), 'inputs/x/shape': (FEATURES,), 'inputs/y/classes': CLASSES,
                       'loss': 'ce', 'optimizer': 'Adam', 'device': device, 'checkpoint_activations': checkpoint})


def peak_memory(arm, x, y, device):
    """(bytes kept for backward outside recomputation, the GPU's step peak or None) of one step of ``arm``."""
    cuda = device.startswith('cuda')
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        arm.train(x=x, y=y, seed=0)
        torch.cuda.synchronize()
        gpu_peak = torch.cuda.max_memory_allocated() - before
    counter = SavedActivations()
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
        arm.train(x=x, y=y, seed=0)
    return counter.peak, gpu_peak if cuda else None


def timing(arms, x, y, device, rounds, steps):
    sync = torch.cuda.synchronize if device.startswith('cuda') else (lambda: None)
    times, ratios = {name: [] for name in arms}, []
    for _ in range(rounds):
        total = dict.fromkeys(arms, 0.0)
        for name in ('plain', 'checkpointed', 'checkpointed', 'plain'):
            sync()
            start = time.perf_counter()
            for step in range(steps):
                arms[name].train(x=x, y=y, seed=step)
            sync()
            elapsed = (time.perf_counter() - start) / steps
            times[name].append(elapsed)
            total[name] += elapsed
        ratios.append(total['checkpointed'] / total['plain'])
    return {name: statistics.median(values) for name, values in times.items()}, statistics.median(ratios)


def main(args):
    device = args.device
    if device == 'auto':
        device = 'cuda' if torch.cuda.is_available() else 'cpu'
    if device.startswith('cuda') and not torch.cuda.is_available():
        sys.exit(f'Expected a CUDA device for --device {device}. Received: torch sees none here. Use --device cpu.')
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, FEATURES, generator=generator).to(device)
    y = torch.randint(0, CLASSES, (args.batch,), generator=generator).to(device)
    arms = {'plain': model(args.blocks, device, None), 'checkpointed': model(args.blocks, device, True)}
    for arm in arms.values():       # warm-up: the first calls, Adam's state, the allocator's pools
        arm.train(x=x, y=y, seed=0)
    memory = {name: peak_memory(arm, x, y, device) for name, arm in arms.items()}
    times, ratio = timing(arms, x, y, device, args.rounds, args.steps)
    same = all(torch.equal(a, b) for a, b in zip(arms['plain'].model.parameters(),
                                                arms['checkpointed'].model.parameters()))
    name = torch.cuda.get_device_name(0) if device.startswith('cuda') else f'{os.cpu_count()} cores'
    parameters = sum(p.numel() * p.element_size() for p in arms['plain'].model.parameters())
    print(f'{device} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}; MLP of {args.blocks} '
          f'blocks, width {WIDTH}, batch {args.batch}, float32, Adam ({parameters / 2**20:.1f} MiB of parameters); '
          f'load average {", ".join(f"{v:.1f}" for v in os.getloadavg())}')
    kept = {name: value[0] for name, value in memory.items()}
    print(f'kept for backward outside recomputation (saved_tensors_hooks, peak live): plain '
          f'{kept["plain"] / 2**20:.1f} MiB, checkpointed {kept["checkpointed"] / 2**20:.1f} MiB, ratio '
          f'{kept["checkpointed"] / kept["plain"]:.3f}')
    if device.startswith('cuda'):
        peak = {name: value[1] for name, value in memory.items()}
        print(f'GPU step peak over the memory before it (max_memory_allocated): plain {peak["plain"] / 2**20:.1f} '
              f'MiB, checkpointed {peak["checkpointed"] / 2**20:.1f} MiB, ratio '
              f'{peak["checkpointed"] / peak["plain"]:.3f}')
    print(f'step time ({args.rounds} ABBA rounds of {args.steps} steps): plain {times["plain"] * 1e3:.1f} ms, '
          f'checkpointed {times["checkpointed"] * 1e3:.1f} ms, ratio {ratio:.3f} (median of per-round ratios)')
    print(f'parameters after the run equal bit for bit: {same}')
    for arm in arms.values():
        arm.close()
    if not same:
        sys.exit('Expected the same parameters with and without checkpointing. Received: different ones.')


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='auto', help="'auto' (CUDA where available), 'cpu' or 'cuda'")
    parser.add_argument('--blocks', type=int, default=6)
    parser.add_argument('--batch', type=int, default=1024)
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--steps', type=int, default=5)
    parser.add_argument('--threads', type=int, default=1)
    main(parser.parse_args())
