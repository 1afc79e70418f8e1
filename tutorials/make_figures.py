"""Make the figures in ``img/`` used by ``docs/pipelines.md`` and the tutorials.

Needs matplotlib, which flowpipe does not depend on: ``pip install matplotlib``, then
``python tutorials/make_figures.py`` from anywhere. Runs in well under a minute on a CPU.

- ``img/loss_curve.png``: the training loss of the run in ``tutorials/02_training.ipynb`` (same model, data and seeds).
- ``img/batchnorm_shards.png``: how far one training step on several devices or micro-batches lands from the
  single-device step, for a network with and without BatchNorm.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flowpipe import B, D, V, Pipeline  # noqa: E402  (after the path set-up above)
from flowpipe.models.torch import SimpleCNN  # noqa: E402
from flowpipe.opensets import Digits  # noqa: E402

IMG = ROOT / 'img'
LAYOUTS = {'2 devices': (['CPU:0', 'CPU:1'], None),
           '4 devices': (['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3'], None),
           'micro-batches of 16': ('CPU:0', 16),
           '2 devices,\nmicro-batches of 16': (['CPU:0', 'CPU:1'], 16)}
FLOOR = 1e-18      # a log axis cannot show an exact zero


def training_losses(digits: Digits) -> list[float]:
    """The loss history of the training run in ``tutorials/02_training.ipynb``."""
    torch.manual_seed(0)
    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
              'initial_block/inputs': 'images', 'body/filters': (16, 32, 64),
              'optimizer': {'name': 'Adam', 'lr': 3e-3}}
    pipeline = (Pipeline()
                .init_variable('loss_history', [])
                .init_model('dynamic', SimpleCNN, 'cnn', config=config)
                .resize((16, 16))
                .to_array()
                .multiply(1 / 255)
                .train_model('cnn', fetches='loss', images=B.images, labels=B.labels,
                             save_to=V('loss_history', mode='a'), use_lock=True)) << digits.train
    pipeline.run(64, shuffle=True, n_epochs=4, drop_last=True, seed=0, prefetch=2)
    return pipeline.v('loss_history')


def step_parameters(batch, device, microbatch, batch_norm: bool) -> list[torch.Tensor]:
    """Parameters after one SGD step on ``batch`` from fixed initial weights, in float64."""
    torch.manual_seed(0)
    model = SimpleCNN({'inputs/images/shape': batch.image_shape, 'inputs/labels/classes': 10,
                       'initial_block/inputs': 'images', 'batch_norm': batch_norm, 'dtype': 'float64',
                       'device': device, 'microbatch': microbatch, 'optimizer': {'name': 'SGD', 'lr': 0.1}})
    model.train(images=batch.images, labels=batch.labels)
    return [parameter.detach().clone() for parameter in model.model.parameters()]


def layout_differences(digits: Digits) -> dict[bool, list[float]]:
    """Per BatchNorm setting, the largest parameter difference of each layout from the single-device step."""
    batch = digits.train.create_batch(digits.train.indices[:64]).to_array().multiply(1 / 255)
    found = {}
    for batch_norm in (False, True):
        reference = step_parameters(batch, 'CPU:0', None, batch_norm)
        found[batch_norm] = []
        for device, microbatch in LAYOUTS.values():
            params = step_parameters(batch, device, microbatch, batch_norm)
            found[batch_norm].append(max(float((a - b).abs().max()) for a, b in zip(reference, params)))
    return found


def plot_losses(losses: list[float], path: Path) -> None:
    import matplotlib.pyplot as plt
    window = 10
    smooth = np.convolve(losses, np.ones(window) / window, mode='valid')
    figure, axes = plt.subplots(figsize=(6, 3.2), dpi=100)
    axes.plot(losses, color='#9ab', linewidth=1, label='loss per batch')
    axes.plot(np.arange(window - 1, len(losses)), smooth, color='#d62', linewidth=2, label=f'mean of {window}')
    axes.set(xlabel='batch', ylabel='cross-entropy', title='SimpleCNN on Digits, 4 epochs of batches of 64')
    axes.legend(frameon=False)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def plot_differences(found: dict[bool, list[float]], path: Path) -> None:
    import matplotlib.pyplot as plt
    positions = np.arange(len(LAYOUTS))
    figure, axes = plt.subplots(figsize=(6.4, 3.4), dpi=100)
    for offset, batch_norm, color in ((-0.2, False, '#4a8'), (0.2, True, '#d62')):
        values = np.maximum(found[batch_norm], FLOOR)
        axes.bar(positions + offset, values, width=0.4, color=color,
                 label='with BatchNorm' if batch_norm else 'without BatchNorm')
    axes.set_yscale('log')
    axes.set_ylim(FLOOR, 1)
    axes.set_xticks(positions, list(LAYOUTS), fontsize=8)
    axes.set_ylabel('largest parameter difference')
    axes.set_title('One SGD step (float64, batch of 64) vs the same step on one device', fontsize=10)
    axes.legend(frameon=False, fontsize=8, loc='center right')
    axes.grid(axis='y', alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def main() -> None:
    IMG.mkdir(exist_ok=True)
    digits = Digits()
    plot_losses(training_losses(digits), IMG / 'loss_curve.png')
    found = layout_differences(digits)
    for batch_norm, values in found.items():
        print('batch_norm' if batch_norm else 'no batch norm', ['%.1e' % value for value in values])
    plot_differences(found, IMG / 'batchnorm_shards.png')
    for name in ('loss_curve.png', 'batchnorm_shards.png'):
        print(f"wrote img/{name}: {(IMG / name).stat().st_size // 1024} KB")


if __name__ == '__main__':
    main()
