"""Image augmentation: a flowpipe pipeline against a per-item loop of torchvision-style functional calls.

The chain, with one random parameter per image: rotate by U(-15, 15) degrees, scale by U(0.9, 1.1) keeping the
size, shift by U(-8, 8) pixels on each axis, add Gaussian noise (sigma 8, clipped, back to uint8), flip
left-right with probability 0.5. The data: 64 uint8 RGB images of 224x224 (channels-last, as decoded files come).

- flowpipe: ``rotate(P(R(...)))``, ``scale(P(R(...)), preserve_shape=True)``, ``shift(P(R(...)))``,
  ``additive_noise(('normal', 0, 8), clip=True, preserve_type=True)``, ``flip(p=0.5)``, run by a pipeline.
- per-item loop: what a user writes with ``torchvision.transforms.v2.functional`` on uint8 tensors, spelled out
  in torch (torchvision is not a dependency): every geometric call turns the image to float, builds its
  ``affine_grid``, calls ``grid_sample`` and rounds back to uint8, as ``F.rotate`` / ``F.affine`` do; the noise
  is ``torch.randn`` per image; the flip ``torch.flip``.

Both arms run in this process with the same torch thread count, timed in alternating blocks (ABBA); the script
prints the median ms per batch of each and the median of the per-block-pair ratios loop / flowpipe (target:
>= 3). flowpipe's edge comes from vectorizing the per-item parameters and from fusing the three geometric
actions into one resampling (see docs/images.md); a first check prints how far the two arms' images lie apart
for the same parameters, to show they do the same work.

Run: ``python bench/augment.py [--threads 1] [--iters 3] [--repeats 6] [--device cpu|cuda]``
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

from flowpipe import Dataset, ImagesBatch, P, Pipeline, R

N, SIZE = 64, 224


def make_images(device: str) -> torch.Tensor | np.ndarray:
    """64 smooth random RGB images, uint8, (N, H, W, C)."""
    rng = np.random.default_rng(0)
    coarse = rng.integers(0, 256, (N, 3, 28, 28)).astype(np.float32)
    smooth = F.interpolate(torch.from_numpy(coarse), size=(SIZE, SIZE), mode='bicubic', align_corners=False)
    images = smooth.clamp(0, 255).round().to(torch.uint8).permute(0, 2, 3, 1).contiguous()
    return images.numpy() if device == 'cpu' else images.to(device)


def flowpipe_pipeline(images, angle=None, factor=None, offset=None, sigma=8.0, flip=0.5) -> Pipeline:
    """The chain as a flowpipe pipeline; fixed parameters replace the random ones when given (for the check)."""
    dataset = Dataset(N, batch_class=ImagesBatch, preloaded={'images': images, 'labels': np.zeros(N)})
    return (dataset.p
            .rotate(P(R('uniform', -15, 15)) if angle is None else angle)
            .scale(P(R('uniform', 0.9, 1.1)) if factor is None else factor, preserve_shape=True)
            .shift(P(R('uniform', -8, 8, size=2)) if offset is None else offset)
            .additive_noise(('normal', 0, sigma), clip=True, preserve_type=True)
            .flip(p=flip))


def affine(image: torch.Tensor, theta: list) -> torch.Tensor:
    """One torchvision-style affine call on a uint8 (C, H, W) image: float, grid, sample, round back."""
    matrix = torch.tensor(theta, dtype=torch.float32, device=image.device)[None]
    grid = F.affine_grid(matrix, [1, *image.shape], align_corners=False)
    out = F.grid_sample(image[None].float(), grid, mode='bilinear', padding_mode='zeros', align_corners=False)
    return out[0].round_().clamp_(0, 255).to(torch.uint8)


def loop_one(image: torch.Tensor, angle: float, factor: float, dx: float, dy: float, sigma: float, flip: bool,
             generator: torch.Generator) -> torch.Tensor:
    """The chain on one image, as a per-item loop writes it (parameters in the order the calls take them)."""
    _, height, width = image.shape
    cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    image = affine(image, [[cos, -sin * height / width, 0], [sin * width / height, cos, 0]])   # rotate
    image = affine(image, [[1 / factor, 0, 0], [0, 1 / factor, 0]])                            # scale
    image = affine(image, [[1, 0, -2 * dx / width], [0, 1, -2 * dy / height]])                  # shift
    noise = torch.randn(image.shape, generator=generator, device=image.device) * sigma
    image = (image.float() + noise).round_().clamp_(0, 255).to(torch.uint8)
    return image.flip(-1) if flip else image


def loop_batch(images, rng: np.random.Generator, generator: torch.Generator, fixed: dict | None = None):
    """The per-item loop over a batch of (N, H, W, C) uint8 images; returns (N, H, W, C)."""
    batch = torch.as_tensor(images)
    out = []
    for image in batch:
        params = fixed or {'angle': rng.uniform(-15, 15), 'factor': rng.uniform(0.9, 1.1),
                           'dx': rng.uniform(-8, 8), 'dy': rng.uniform(-8, 8), 'sigma': 8.0,
                           'flip': rng.random() < 0.5}
        out.append(loop_one(image.permute(2, 0, 1), generator=generator, **params).permute(1, 2, 0))
    return torch.stack(out)


def check_same_work(images) -> float:
    """Median |difference| of the two arms' images for the same fixed parameters, away from the borders."""
    fixed = {'angle': 10.0, 'factor': 1.05, 'dx': 3.0, 'dy': -2.0, 'sigma': 0.0, 'flip': True}
    ours = flowpipe_pipeline(images, 10.0, 1.05, (3.0, -2.0), sigma=0.0, flip=1.0).next_batch(N).images
    theirs = loop_batch(images, None, torch.Generator(device=torch.as_tensor(images).device), fixed)
    difference = (torch.as_tensor(ours).int() - theirs.int()).abs()[:, 24:-24, 24:-24]
    return float(difference.float().median())


def flowpipe_block(pipeline: Pipeline, iters: int) -> None:
    """``iters`` batches of the pipeline, each read as a model would (reading resamples any waiting warp)."""
    for batch in pipeline.gen_batch(N, n_iters=iters, seed=7):
        assert batch.images.shape == (N, SIZE, SIZE, 3)


def timed(block, device: str) -> float:
    start = time.perf_counter()
    block()
    if device != 'cpu':
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(images, device: str, iters: int, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds per batch of each arm, per block; blocks alternate ABBA."""
    pipeline = flowpipe_pipeline(images)
    rng, generator = np.random.default_rng(1), torch.Generator(device=device).manual_seed(1)
    arms = {'flowpipe': lambda: flowpipe_block(pipeline, iters),
            'loop': lambda: [loop_batch(images, rng, generator) for _ in range(iters)]}
    for arm in arms.values():
        timed(arm, device)   # warm-up
    times: dict[str, list[float]] = {name: [] for name in arms}
    for repeat in range(repeats):
        for name in (('flowpipe', 'loop') if repeat % 2 == 0 else ('loop', 'flowpipe')):
            times[name].append(timed(arms[name], device) / iters)
    return times['flowpipe'], times['loop']


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--iters', type=int, default=3, help='batches per block')
    parser.add_argument('--repeats', type=int, default=6, help='blocks per arm')
    parser.add_argument('--device', default='cpu', help="'cpu' or 'cuda'")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    images = make_images(args.device)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, {N} images '
          f'{SIZE}x{SIZE}x3 uint8, {args.iters} batches per block, {args.repeats} blocks per arm (ABBA)')
    print(f'same parameters, median |flowpipe - loop| inside the border: {check_same_work(images):.1f} grey levels')
    ours, loop = measure(images, args.device, args.iters, args.repeats)
    ratios = [b / a for a, b in zip(ours, loop)]
    print(f'flowpipe {1000 * statistics.median(ours):8.1f} ms/batch   '
          f'per-item loop {1000 * statistics.median(loop):8.1f} ms/batch   '
          f'loop / flowpipe: {statistics.median(ratios):.2f}x (blocks: {", ".join(f"{r:.2f}" for r in ratios)})')


if __name__ == '__main__':
    main()
