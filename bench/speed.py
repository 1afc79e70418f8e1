"""flowpipe's speed options against the training loop a user would write by hand, in one process.

Every arm trains the same network on the same batches: shuffled batches of the shipped Digits images (uint8,
8x8), resized to 32x32 with the same antialiased bilinear ``F.interpolate`` call, one Adam step on cross-entropy.

- ``naive``: the hand-written NCHW loop: resize, then a float32 ``(N, C, H, W)`` tensor with row-major strides,
  ``zero_grad``, forward, loss, backward, ``step``; every ratio is against this arm;
- ``naive .contiguous()``: the same loop ending in ``.float().contiguous()``, as most code is written. For these
  one-channel images that call changes nothing, and the tensor keeps the channels-last strides that ``permute``
  and ``interpolate`` gave it (a one-channel tensor counts as contiguous either way), so oneDNN computes the
  network channels-last: shown to make the accident visible;
- ``default``: a flowpipe pipeline ``resize((32, 32)).to_array().train_model(...)`` with a default model config;
- ``channels_last``: ``to_array(memory_format='channels_last')`` and the model key ``memory_format='channels_last'``;
- ``bf16``: the model key ``amp=True`` (bfloat16 autocast on a CPU);
- ``channels_last+bf16``: both;
- ``compile``: the model key ``compile=True`` (inductor; compiled during the warm-up, before any timing), with
  channels-last: for the small CNN by default, for ResNet18 with ``--compile-all`` (compiling it takes minutes).
- ``fused_adam``: the optimizer config ``{'name': 'Adam', 'fused': True}`` (torch's one-kernel Adam);
- ``channels_last+fused_adam``: both.

Networks: the small CNN (``SimpleCNN``, widths 16, 32, 64) and the demo's ResNet18 (32x32 inputs: the ImageNet stem,
8x8 maps). All arms run in this one process with one torch thread (``--threads``). Each round times every arm
in a block beside a block of ``naive``, the naive block first in even rounds and second in odd ones (ABBA), arms
in reversed order every other round; the median over rounds of ``naive time / arm time`` of the two adjacent
blocks is printed (above 1: faster than the hand loop), with its range.

On a machine with CUDA the same arms run on ``cuda:0`` (bf16 there is ``amp='bfloat16'``; every flowpipe arm adds
``to_device('GPU:0')`` under ``prefetch=2``, so the next batch is copied through pinned memory while one trains,
and the naive loop copies with ``.to('cuda')``); without CUDA the GPU part says so and is skipped.

``--profile`` first prints where the naive loop's time goes (the share of its convolutions, its largest operators).

Run: ``python bench/speed.py [--iters 10] [--rounds 8] [--batch-size 64] [--threads 1] [--networks cnn resnet18]``
(``--no-cpu``: the GPU part alone; ``--no-gpu``: the CPU part alone)
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from flowpipe import B, Pipeline
from flowpipe.models.torch import ResNet18, SimpleCNN
from flowpipe.opensets import Digits

SHAPE, CLASSES = (1, 32, 32), 10
NETWORKS = {'cnn': SimpleCNN, 'resnet18': ResNet18}
FUSED_ADAM = {'name': 'Adam', 'fused': True}      # torch's one-kernel Adam, passed through the optimizer config
OPTIONS = {'default': {}, 'channels_last': {'memory_format': 'channels_last'}, 'bf16': {'amp': True},
           'channels_last+bf16': {'memory_format': 'channels_last', 'amp': True},
           'compile': {'compile': True, 'memory_format': 'channels_last'},
           'fused_adam': {'optimizer': FUSED_ADAM},
           'channels_last+fused_adam': {'memory_format': 'channels_last', 'optimizer': FUSED_ADAM}}


def hand_batch(images: np.ndarray, device: torch.device, row_major: bool) -> torch.Tensor:
    """What a user writes: NHWC uint8 -> resized NCHW float32; ``row_major``: with NCHW strides for sure."""
    batch = torch.from_numpy(images).permute(0, 3, 1, 2)
    batch = F.interpolate(batch, size=(32, 32), mode='bilinear', align_corners=False, antialias=True).float()
    batch = batch.clone(memory_format=torch.contiguous_format) if row_major else batch.contiguous()
    return batch.to(device)


def naive_arm(network: torch.nn.Module, images: np.ndarray, labels: np.ndarray, batch_size: int,
              device: torch.device, row_major: bool = True) -> Callable[[int, int], float]:
    """The hand-written loop as an arm: ``arm(iters, seed)`` -> seconds per iteration."""
    optimizer = torch.optim.Adam(network.parameters())

    def arm(iters: int, seed: int) -> float:
        start = time.perf_counter()
        order = np.random.default_rng(seed).permutation(len(labels))
        network.train()
        for step in range(iters):
            at = (step * batch_size) % (len(labels) - batch_size + 1)
            index = order[at:at + batch_size]
            batch = hand_batch(images[index], device, row_major)
            target = torch.from_numpy(labels[index]).to(device)
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(network(batch), target).backward()
            optimizer.step()
        synchronize(device)
        return (time.perf_counter() - start) / iters
    return arm


def flowpipe_arm(model, dataset, batch_size: int, options: dict, device: torch.device) -> Callable[[int, int], float]:
    """A pipeline feeding ``model`` as an arm."""
    layout = 'channels_last' if options.get('memory_format') == 'channels_last' else 'contiguous'
    pipeline = Pipeline().import_model('net', model).resize((32, 32)).to_array(memory_format=layout)
    prefetch = 0
    if device.type == 'cuda':
        pipeline, prefetch = pipeline.to_device('GPU:0'), 2
    pipeline = pipeline.train_model('net', images=B.images, labels=B.labels) << dataset

    def arm(iters: int, seed: int) -> float:
        start = time.perf_counter()
        pipeline.run(batch_size, n_iters=iters, shuffle=seed, drop_last=True, prefetch=prefetch)
        synchronize(device)
        return (time.perf_counter() - start) / iters
    return arm


def synchronize(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def make_arms(name: str, dataset, images, labels, args, device: torch.device) -> dict[str, Callable]:
    """The naive arm and one flowpipe arm per option, every network starting from the same weights."""
    model_class = NETWORKS[name]
    config = {'inputs/images/shape': SHAPE, 'inputs/labels/classes': CLASSES, 'device': str(device)}
    torch.manual_seed(0)
    network = model_class(config).model          # the same module and weights as every arm's
    arms = {'naive': naive_arm(copy.deepcopy(network), images, labels, args.batch_size, device),
            'naive .contiguous()': naive_arm(copy.deepcopy(network), images, labels, args.batch_size, device,
                                             row_major=False)}
    for option, extra in OPTIONS.items():
        if option not in args.arms or option == 'compile' and name != 'cnn' and not args.compile_all:
            continue
        if device.type == 'cuda' and extra.get('amp'):
            extra = {**extra, 'amp': 'bfloat16'}
        torch.manual_seed(0)
        model = model_class({**config, **extra})
        arms[option] = flowpipe_arm(model, dataset, args.batch_size, extra, device)
    return arms


def measure(arms: dict[str, Callable], iters: int,
            rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per arm, ``naive`` time / arm time of adjacent blocks: every round runs each arm beside a ``naive`` block of
    its own, the naive block first in even rounds and second in odd ones (ABBA), so a change of machine load hits
    both blocks of a pair alike."""
    for arm in arms.values():
        arm(max(2, iters // 2), 0)      # warm-up: kernels, allocator, optimizer state, compilation
    others = [name for name in arms if name != 'naive']
    ratios: dict[str, list[float]] = {name: [] for name in others}
    times: dict[str, list[float]] = {name: [] for name in arms}
    for repeat in range(rounds):
        for name in (others if repeat % 2 == 0 else others[::-1]):
            pair = ('naive', name) if repeat % 2 == 0 else (name, 'naive')
            measured = {arm: arms[arm](iters, repeat + 1) for arm in pair}
            ratios[name].append(measured['naive'] / measured[name])
            for arm, value in measured.items():
                times[arm].append(value)
        print(f'  round {repeat + 1}/{rounds}: ' + ', '.join(f'{name} {values[-1]:.3f}'
                                                          for name, values in ratios.items()), flush=True)
    return {'naive': [1.0] * rounds, **ratios}, times


def profile_naive(name: str, arm: Callable[[int, int], float]) -> None:
    """Where the hand loop's time goes: the self CPU time of its operators over a few iterations."""
    from torch.profiler import profile
    arm(2, 0)
    with profile() as prof:
        arm(3, 0)
    events = prof.key_averages()
    total = sum(event.self_cpu_time_total for event in events)
    convolutions = sum(event.self_cpu_time_total for event in events if 'convolution' in event.key)
    print(f'\n{name}, naive loop: convolutions (forward and backward) take {100 * convolutions / total:.1f} % of '
          f'the self CPU time; the largest operators:')
    for event in sorted(events, key=lambda event: -event.self_cpu_time_total)[:6]:
        print(f'  {event.key:<40} {100 * event.self_cpu_time_total / total:5.1f} %')


def report(network: str, device: torch.device, ratios: dict[str, list[float]], times: dict[str, list[float]]) -> None:
    print(f"\n{network} on {device}: ms per iteration (median of blocks); naive/arm: median of the ratios of "
          f"adjacent blocks (above 1: faster than the hand-written NCHW loop), their range")
    print(f"{'arm':>21} {'ms/iter':>9} {'naive/arm':>10} {'range':>13}")
    for name, values in ratios.items():
        print(f'{name:>21} {1000 * statistics.median(times[name]):>9.2f} {statistics.median(values):>10.3f} '
              f'{min(values):>6.3f}-{max(values):<6.3f}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--iters', type=int, default=10, help='iterations per block')
    parser.add_argument('--rounds', type=int, default=8, help='blocks per arm')
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--networks', nargs='+', choices=sorted(NETWORKS), default=['cnn', 'resnet18'])
    parser.add_argument('--arms', nargs='+', choices=list(OPTIONS), default=list(OPTIONS),
                        help='the flowpipe arms to run beside naive (default: all)')
    parser.add_argument('--compile-all', action='store_true', help='also compile ResNet18 (minutes on a CPU)')
    parser.add_argument('--no-gpu', action='store_true', help='skip the GPU part even where CUDA exists')
    parser.add_argument('--no-cpu', action='store_true', help='skip the CPU part (the GPU part alone)')
    parser.add_argument('--profile', action='store_true', help="first print where the naive loop's time goes")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    dataset = Digits().train
    whole = dataset.next_batch(len(dataset), n_epochs=1)
    images, labels = np.ascontiguousarray(whole.images), np.asarray(whole.labels)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} thread(s), batch {args.batch_size}, '
          f'{args.iters} iterations per block, {args.rounds} rounds')
    devices = [] if args.no_cpu else [torch.device('cpu')]
    if torch.cuda.is_available() and not args.no_gpu:
        devices.append(torch.device('cuda', 0))
    for device in devices:
        for network in args.networks:
            arms = make_arms(network, dataset, images, labels, args, device)
            if args.profile:
                profile_naive(network, arms['naive'])
            report(network, device, *measure(arms, args.iters, args.rounds))
    if not any(device.type == 'cuda' for device in devices):
        print('\nGPU: no CUDA device available here (or --no-gpu); the GPU part was not run.')


if __name__ == '__main__':
    main()
