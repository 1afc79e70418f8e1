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

``--chain torchvision`` times torchvision's augmentation vocabulary instead: ``random_resized_crop(224)``,
``color_jitter(0.4, 0.4, 0.4, 0.1)`` (its own random order of the four steps per image) and ``random_erasing(p=0.5)``
on 64 uint8 RGB images of 320x256, against a per-item loop of the same torch calls (one image at a time: the crop
resized by ``F.interpolate`` with antialias, the four colour steps, the erased box), drawing the same kinds of
parameters. Its check prints how far the two arms lie apart for the same draws (0: the same work).

Run: ``python bench/augment.py [--chain geometry|torchvision] [--threads 1] [--iters 3] [--repeats 6]
[--device cpu|cuda]``
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
from flowpipe.batch.augment_vision_kernels import TRIES, erasing_boxes, jitter, resized_crop_boxes
from flowpipe.batch.images_kernels import resize

N, SIZE = 64, 224


def make_images(device: str, size: tuple[int, int] = (SIZE, SIZE)) -> torch.Tensor | np.ndarray:
    """64 smooth random RGB images, uint8, (N, H, W, C), of ``size=(width, height)``."""
    rng = np.random.default_rng(0)
    coarse = rng.integers(0, 256, (N, 3, 28, 28)).astype(np.float32)
    smooth = F.interpolate(torch.from_numpy(coarse), size=size[::-1], mode='bicubic', align_corners=False)
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


JITTER = ((0.6, 1.4), (0.6, 1.4), (0.6, 1.4), (-0.1, 0.1))   # color_jitter(0.4, 0.4, 0.4, 0.1) as ranges
ERASING = ((0.02, 0.33), (0.3, 3.3))


def vision_pipeline(images) -> Pipeline:
    """The torchvision chain as a flowpipe pipeline."""
    dataset = Dataset(N, batch_class=ImagesBatch, preloaded={'images': images, 'labels': np.zeros(N)})
    return dataset.p.random_resized_crop(SIZE).color_jitter(0.4, 0.4, 0.4, 0.1).random_erasing(p=0.5)


def vision_draws(random: np.random.Generator, n: int) -> dict:
    """The uniform numbers the three actions draw for ``n`` images, in their order."""
    return {'tries': random.random((n, TRIES, 2)), 'corner': random.random((n, 2)),
            'order': random.random((n, 4)), 'factors': random.random((n, 4)), 'erase': random.random(n) < 0.5,
            'erase_tries': random.random((n, TRIES, 2)), 'erase_corner': random.random((n, 2))}


def vision_one(image: torch.Tensor, draws: dict, k: int) -> torch.Tensor:
    """The chain on one (C, H, W) uint8 image with item ``k``'s draws: crop and resize, jitter, erase."""
    sizes = np.array([[image.shape[2], image.shape[1]]])
    x, y, w, h = resized_crop_boxes(sizes, (0.08, 1.0), (3 / 4, 4 / 3), draws['tries'][k:k + 1],
                                    draws['corner'][k:k + 1])[0].tolist()
    image = resize(image[None, :, y:y + h, x:x + w], (SIZE, SIZE))
    lows, highs = np.array(JITTER).T
    factors = lows + draws['factors'][k:k + 1] * (highs - lows)
    image = jitter(image, np.argsort(draws['order'][k:k + 1], axis=1, kind='stable'), factors, (True,) * 4)[0]
    if draws['erase'][k]:
        x, y, w, h = erasing_boxes(np.array([[SIZE, SIZE]]), *ERASING, draws['erase_tries'][k:k + 1],
                                   draws['erase_corner'][k:k + 1])[0].tolist()
        image[:, y:y + h, x:x + w] = 0
    return image


def vision_loop(images, rng: np.random.Generator) -> torch.Tensor:
    """The per-item loop over a batch of (N, H, W, C) uint8 images; returns (N, H, W, C)."""
    batch = torch.as_tensor(images)
    out = []
    for image in batch:
        draws = vision_draws(rng, 1)
        out.append(vision_one(image.permute(2, 0, 1), draws, 0).permute(1, 2, 0))
    return torch.stack(out)


def check_vision_work(images) -> float:
    """Largest |difference| of the two arms' images for the same draws."""
    batch = ImagesBatch(N, data={'images': images})
    batch.seed = 5
    ours = batch.random_resized_crop(SIZE).color_jitter(0.4, 0.4, 0.4, 0.1).random_erasing(p=0.5).images
    again = ImagesBatch(N, data={'images': images})
    again.seed = 5
    draws = vision_draws(again.random, N)
    order = ('tries', 'corner', 'order', 'factors', 'erase', 'erase_tries', 'erase_corner')
    assert list(draws) == list(order)
    theirs = torch.stack([vision_one(image.permute(2, 0, 1), draws, k).permute(1, 2, 0)
                          for k, image in enumerate(torch.as_tensor(images))])
    return float((torch.as_tensor(ours).int() - theirs.int()).abs().max())


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


def measure(images, device: str, iters: int, repeats: int, chain: str) -> tuple[list[float], list[float]]:
    """Seconds per batch of each arm, per block; blocks alternate ABBA."""
    rng, generator = np.random.default_rng(1), torch.Generator(device=device).manual_seed(1)
    if chain == 'torchvision':
        pipeline = vision_pipeline(images)
        loop = lambda: vision_loop(images, rng)  # noqa: E731
    else:
        pipeline = flowpipe_pipeline(images)
        loop = lambda: loop_batch(images, rng, generator)  # noqa: E731
    arms = {'flowpipe': lambda: flowpipe_block(pipeline, iters),
            'loop': lambda: [loop() for _ in range(iters)]}
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
    parser.add_argument('--chain', default='geometry', choices=('geometry', 'torchvision'))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    size = (320, 256) if args.chain == 'torchvision' else (SIZE, SIZE)
    images = make_images(args.device, size)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, chain {args.chain}, '
          f'{N} images {size[0]}x{size[1]}x3 uint8, {args.iters} batches per block, {args.repeats} blocks per arm '
          f'(ABBA)')
    if args.chain == 'torchvision':
        print(f'same draws, largest |flowpipe - loop|: {check_vision_work(images):.0f} grey levels')
    else:
        print(f'same parameters, median |flowpipe - loop| inside the border: {check_same_work(images):.1f} grey '
              f'levels')
    ours, loop = measure(images, args.device, args.iters, args.repeats, args.chain)
    ratios = [b / a for a, b in zip(ours, loop)]
    print(f'flowpipe {1000 * statistics.median(ours):8.1f} ms/batch   '
          f'per-item loop {1000 * statistics.median(loop):8.1f} ms/batch   '
          f'loop / flowpipe: {statistics.median(ratios):.2f}x (blocks: {", ".join(f"{r:.2f}" for r in ratios)})')


if __name__ == '__main__':
    main()
