"""Per-step cost of the loss normalization: a placed loss against the same loss weighted by item shares.

Arms, on the same engine plan and weights: ``placed``, torch's ``nn.CrossEntropyLoss()`` (flowpipe's ``'ce'``): with
several pieces the engine counts the valid targets of the whole batch (``ignore_index``) and each piece adds its
sum divided by that count; and ``shares``, the same module called from a function (which flowpipe cannot place):
each piece's mean weighted by its share of the items, the rule before the normalization. Networks and batches as in
``bench/engine_step.py`` (``cnn``: batch 32 of 1x16x16 images; ``tiny``: one linear layer, batch 8), Adam, float32,
one device, with the whole batch in one piece (``microbatch`` off: the placed loss takes the item path, nothing is
counted) and cut into micro-batches (``--microbatch``, default 4). Blocks of ``--steps`` steps alternate ABBA, fixed
torch threads, CPU time of the process; printed per setting: the median ms per step of each arm, the median of the
per-block differences (µs per step) and of the per-block ratios placed / shares.

With ``--deviations`` it prints instead, for every loss of ``tests/parallel/loss_cases.py`` (12 items, the first 4
padding where the loss can ignore items), the largest relative deviation of float64 parameters after one SGD step
from the hand-written full-batch step, on the layouts of ``docs/parallel.md``'s table, with the loss placed and with
the same loss behind a function (item shares, the rule before the normalization).

Run: ``python bench/loss_normalization.py [--steps 100] [--blocks 21] [--threads 1] [--microbatch 4] [--deviations]``
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import warnings

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine_step import abba, cnn, tiny  # noqa: E402

from flowpipe.parallel import build_engine, make_plan  # noqa: E402


def arm(net: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, loss_fn, microbatch: int | None):
    engine = build_engine(copy.deepcopy(net), make_plan('cpu', microbatch))
    optimizer = torch.optim.Adam(engine.parameters())
    return lambda: engine.train_step([inputs], [targets], loss_fn, optimizer).loss


def measure(make, steps: int, blocks: int, microbatch: int | None) -> dict[str, float]:
    net, inputs, targets = make()
    placed, unplaced = nn.CrossEntropyLoss(), nn.CrossEntropyLoss()
    return abba({'placed': arm(net, inputs, targets, placed, microbatch),
                 # the same module behind a function: flowpipe cannot place it, so the pieces take the item shares
                 'shares': arm(net, inputs, targets, lambda outputs, target: unplaced(outputs, target), microbatch)},
                steps, blocks)


def deviations() -> None:
    """The table of ``--deviations``."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.parallel.loss_cases import CASES, batch, engine_step, reference_step, relative
    warnings.filterwarnings('ignore', "reduction: 'mean' divides the total loss")     # KLDivLoss's 'mean'
    layouts = {"['CPU:0', 'CPU:1']": (['CPU:0', 'CPU:1'], None), 'microbatch=3': ('cpu', 3),
               "'CPU:0x3', microbatch=4": ('CPU:0x3', 4)}
    print(f"{'loss':>32} {'rule':>12} " + ' '.join(f'{name:>24}' for name in layouts))
    for name, (make, _, _) in CASES.items():
        inputs, targets = batch(name, 12, ignored=range(4))
        expected, _ = reference_step(name, inputs, targets)
        for rule in ('placed', 'item shares'):
            cells = []
            for device, microbatch in layouts.values():
                loss = make()
                shares = (lambda outputs, *tensors: loss(outputs, *tensors)) if rule == 'item shares' else loss
                params, value = engine_step(name, inputs, targets, device, microbatch, loss=shares)
                cells.append(f'{relative(params, expected):.1e}' + (' (loss nan)' if value != value else ''))
            print(f'{name:>32} {rule:>12} ' + ' '.join(f'{cell:>24}' for cell in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=100)
    parser.add_argument('--blocks', type=int, default=21)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--microbatch', type=int, default=4)
    parser.add_argument('--deviations', action='store_true', help='the deviation table instead of the timing')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.deviations:
        deviations()
        return
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, {args.blocks} blocks of {args.steps} '
          f'steps per arm, ABBA')
    print(f"{'network':>8} {'microbatch':>10} {'placed ms':>10} {'shares ms':>10} {'cost us/step':>13} {'ratio':>6}")
    for name, make in (('cnn', cnn), ('tiny', tiny)):
        for microbatch in (None, args.microbatch):
            result = measure(make, args.steps, args.blocks, microbatch)
            print(f"{name:>8} {str(microbatch):>10} {1e3 * result['placed']:10.3f} {1e3 * result['shares']:10.3f} "
                  f"{1e6 * result['cost']:13.1f} {result['ratio']:6.3f}")


if __name__ == '__main__':
    main()
