"""Per-step cost of an engine's training step against the same step written by hand, on one device.

Arms: ``engine.train_step(...)`` of a single-device engine, and the hand-written step (``zero_grad``, forward,
loss, backward, ``step``, ``loss.item()``). Two networks:
``cnn`` (two conv + BatchNorm layers, batch 32 of 1x16x16 images, the setting of ``docs/parallel.md``) and
``tiny`` (one linear layer, batch 8: the step is almost all framework, so the engine's own cost shows). Adam,
float32, starting from the same weights. Blocks of ``--steps`` steps alternate ABBA between the arms, with a
fixed torch thread count, timed in CPU time of the process (``time.process_time``: on a shared machine, time
spent descheduled would swamp a cost of microseconds); the script prints, per network, the median over blocks of
ms per step of each arm, the median of the per-block differences (the engine's cost per step, in µs) and of the
per-block ratios. Use one torch thread (the default): with more, CPU time counts the threads' spinning too.

The engine keeps the loss on the device (a tensor; the hand step reads it with ``.item()``); with
``--skip-nonfinite`` it also checks loss and gradient before each step, as a ``TorchModel`` does by default.

Run: ``python bench/engine_step.py [--steps 100] [--blocks 21] [--threads 1] [--clip 1.0] [--skip-nonfinite]``
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.parallel import build_engine, make_plan


def cnn() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(16, 10))
    return net, torch.randn(32, 1, 16, 16), torch.randint(0, 10, (32,))


def tiny() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Linear(16, 4), torch.randn(8, 16), torch.randint(0, 4, (8,))


def hand_arm(net: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, clip: float | None):
    net = copy.deepcopy(net)
    optimizer = torch.optim.Adam(net.parameters())

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(inputs), targets)
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        optimizer.step()
        return loss.item()
    net.train()
    return step


def engine_arm(net: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, clip: float | None,
               skip_nonfinite: bool = False):
    engine = build_engine(copy.deepcopy(net), make_plan('cpu'))
    engine.skip_nonfinite = skip_nonfinite      # TorchModel's default ('nonfinite_loss': 'skip') sets it
    optimizer = torch.optim.Adam(engine.parameters())
    options = {} if clip is None else {'clip_grad_norm': clip}   # the keyword is unknown to older engines

    def step() -> float:
        return engine.train_step([inputs], [targets], F.cross_entropy, optimizer, **options).loss
    return step


def block(step, steps: int) -> float:
    """Seconds of CPU time per step (with one torch thread, time lost to other processes does not count)."""
    start = time.process_time()
    for _ in range(steps):
        step()
    return (time.process_time() - start) / steps


def abba(arms: dict, steps: int, blocks: int) -> dict[str, float]:
    """Time two arms ``{'a': step, 'b': step}`` in alternating blocks (A B, then B A...) after a warm-up block each:
    the median seconds per step of each, and the medians of the per-block differences (``'cost'``, a - b) and
    ratios (``'ratio'``, a / b)."""
    (a, step_a), (b, step_b) = arms.items()
    for step in (step_a, step_b):
        block(step, steps)                          # warm-up: kernels, allocator, Adam state
    times: dict[str, list[float]] = {a: [], b: []}
    for index in range(blocks):
        for name in ((a, b) if index % 2 == 0 else (b, a)):
            times[name].append(block(arms[name], steps))
    pairs = list(zip(times[a], times[b]))
    return {a: statistics.median(times[a]), b: statistics.median(times[b]),
            'cost': statistics.median(x - y for x, y in pairs), 'ratio': statistics.median(x / y for x, y in pairs)}


def measure(make, steps: int, blocks: int, clip: float | None, skip_nonfinite: bool = False) -> dict[str, float]:
    net, inputs, targets = make()
    return abba({'engine': engine_arm(net, inputs, targets, clip, skip_nonfinite),
                 'hand': hand_arm(net, inputs, targets, clip)}, steps, blocks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=100)
    parser.add_argument('--blocks', type=int, default=21)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--clip', type=float, default=None, help='clip_grad_norm in both arms (default: none)')
    parser.add_argument('--skip-nonfinite', action='store_true',
                        help="the engine checks loss and gradient before the step, as a TorchModel does by default")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, {args.blocks} blocks of {args.steps} '
          f'steps per arm, ABBA, clip_grad_norm={args.clip}, '
          f'skip_nonfinite={args.skip_nonfinite}')
    print(f"{'network':>8} {'hand ms':>8} {'engine ms':>10} {'cost us/step':>13} {'ratio':>6}")
    for name, make in (('cnn', cnn), ('tiny', tiny)):
        result = measure(make, args.steps, args.blocks, args.clip, args.skip_nonfinite)
        print(f"{name:>8} {1e3 * result['hand']:8.3f} {1e3 * result['engine']:10.3f} "
              f"{1e6 * result['cost']:13.1f} {result['ratio']:6.3f}")


if __name__ == '__main__':
    main()
