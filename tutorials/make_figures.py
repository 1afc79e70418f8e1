"""Make the figures in ``img/`` used by the README, the docs and the tutorials.

Needs matplotlib, which flowpipe does not depend on: ``pip install flowpipe[figures]`` (or ``pip install
matplotlib``), then ``python tutorials/make_figures.py [name ...] [--out DIR]`` from anywhere, with names among
``FIGURES`` (all by default); ``--out`` writes to another folder than ``img/``. Runs in about a minute on a CPU,
with one torch thread (so the trained curves repeat exactly) and matplotlib's Agg backend.

- ``img/batch_split.png``: how a batch is cut into micro-batches and shards over devices (a real plan's pieces).
- ``img/replicas.png``: one data-parallel step: replicas, the gradient sum on the primary, one step, broadcast.
- ``img/loss_curves.png``: the loss of one network on Digits on one device, on replicas, with micro-batches, and
  with BatchNorm on one-item pieces.
- ``img/loss_curve.png``: the training loss of the run in ``tutorials/02_training.ipynb`` (same model, data and seeds).
- ``img/batchnorm_shards.png``: how far one training step on several devices or micro-batches lands from the
  single-device step, for a network with and without BatchNorm.
- ``img/training_run.png``: the curves of the run in ``tutorials/08_training_run.ipynb`` (same model, data, seeds
  and callbacks), plotted from its ``metrics.csv``.
- ``img/augmentations.png``: one Digits image, coloured and enlarged, under each image action of ``docs/images.md``.

Each PNG keeps a record of what it shows (``figure_record.py``): the numbers drawn and a digest of the drawing
code. ``tests/test_figures.py`` regenerates the figures into a temporary folder and compares the records with
those in ``img/`` (numbers within 1 %), not the pixels, which change with matplotlib, FreeType and fonts.
"""
from __future__ import annotations

import inspect
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'tutorials'))

import figure_diagrams  # noqa: E402  (after the path set-up above)
import figure_record  # noqa: E402
from figure_diagrams import plot_batch_split, plot_replicas  # noqa: E402
from flowpipe import B, C, D, ImagesBatch, V, Pipeline  # noqa: E402
from flowpipe.callbacks import CSVLogger, EarlyStopping, ModelCheckpoint, ReduceLROnPlateau, Validate  # noqa: E402
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


AUGMENTATIONS = [
    ('original', lambda b: b),
    ('rotate(30)', lambda b: b.rotate(30)),
    ('rotate(30, expand=True)', lambda b: b.rotate(30, expand=True)),
    ('scale(0.7,\npreserve_shape=True)', lambda b: b.scale(0.7, preserve_shape=True)),
    ('scale((1.5, 1),\npreserve_shape=True)', lambda b: b.scale((1.5, 1), preserve_shape=True)),
    ('shift((16, 8))', lambda b: b.shift((16, 8))),
    ("shift((40, 0),\nmode='wrap')", lambda b: b.shift((40, 0), mode='wrap')),
    ("flip('lr')", lambda b: b.flip('lr')),
    ("flip('ud')", lambda b: b.flip('ud')),
    ("transform('affine',\nshear 0.3)", lambda b: b.transform('affine', (1, 0.3, -14, 0, 1, 0))),
    ("transform('perspective')", lambda b: b.transform('perspective', (1, 0.1, -5, 0, 1.1, -8, 0.004, 0.002))),
    ('elastic_transform(120, 8)', lambda b: b.elastic_transform(120, 8)),
    ("crop('center', (64, 64))", lambda b: b.crop('center', (64, 64))),
    ("pad(16, mode='reflect')", lambda b: b.pad(16, mode='reflect')),
    ('put_on_background(grey,\norigin=(40, 8))', lambda b: b.put_on_background(np.full((128, 144, 3), 90, np.uint8),
                                                                             (40, 8))),
    ("cutout('center', 40, 0)", lambda b: b.cutout('center', 40, 0)),
    ('invert()', lambda b: b.invert()),
    ('clip(70, 180)', lambda b: b.clip(70, 180)),
    ('posterize(2)', lambda b: b.posterize(2)),
    ("enhance('h', 0)", lambda b: b.enhance('h', 0)),
    ("enhance('c', 2)", lambda b: b.enhance('c', 2)),
    ("enhance('b', 0.5)", lambda b: b.enhance('b', 0.5)),
    ("pil_convert('L')", lambda b: b.pil_convert('L')),
    ("additive_noise(\n('normal', 0, 30))", lambda b: b.additive_noise(('normal', 0, 30), clip=True,
                                                                       preserve_type=True)),
    ("multiplicative_noise(\n('uniform', 0.5, 1.5))", lambda b: b.multiplicative_noise(('uniform', 0.5, 1.5),
                                                                                       clip=True, preserve_type=True)),
    ('salt(0.02, size=3)', lambda b: b.salt(0.02, size=3)),
    ("filter('BLUR')", lambda b: b.filter('BLUR')),
    ("filter('FIND_EDGES')", lambda b: b.filter('FIND_EDGES')),
    ("filter('EMBOSS')", lambda b: b.filter('EMBOSS')),
    ("filter('MedianFilter', 7)", lambda b: b.filter('MedianFilter', 7)),
    ("rotate(20).scale(1.2, True)\n.shift((6, 0)).flip()",
     lambda b: b.rotate(20).scale(1.2, True).shift((6, 0)).flip()),
    ('split_to_patches(48)\n(the first of 4)', lambda b: b.split_to_patches(48, stride=48)),
    ('random_resized_crop(96,\nscale=(0.3, 0.6))', lambda b: b.random_resized_crop(96, scale=(0.3, 0.6))),
    ('center_crop((64, 48))', lambda b: b.center_crop((64, 48))),
    ('color_jitter(0.4, 0.4,\n0.4, 0.1)', lambda b: b.color_jitter(0.4, 0.4, 0.4, 0.1)),
    ('color_jitter(\nhue=(0.3, 0.3))', lambda b: b.color_jitter(hue=(0.3, 0.3))),
    ('random_erasing(p=1,\nvalue=(0, 0, 255))', lambda b: b.random_erasing(p=1, value=(0, 0, 255))),
]


def sample_image(digits: Digits) -> np.ndarray:
    """A 96x96 RGB image: a Digits '2' enlarged 8 times, in white on a colour gradient, with a marked corner."""
    some = digits.train.create_batch(digits.train.indices[:30])
    two = some.images[np.flatnonzero(some.labels == 2)[0]]
    strokes = ImagesBatch(1, data={'images': two[None]}).resize((64, 64), mode='nearest').pad(16)
    strokes = strokes.filter('SMOOTH').images[0, :, :, 0]
    ys, xs = np.mgrid[0:96, 0:96] / 95
    background = np.stack([200 * (1 - xs) + 30, 60 + 120 * ys, 80 + 150 * xs], axis=-1)
    image = background * (1 - strokes[..., None] / 255) + 255 * (strokes[..., None] / 255)
    image[4:20, 4:20] = [250, 210, 0]   # a yellow square marks the top-left corner
    return np.clip(image, 0, 255).astype(np.uint8)


def augmented(image: np.ndarray, make) -> np.ndarray:
    """``image`` after ``make(batch)`` on a batch of it (the first patch of patches; grey shown as RGB)."""
    batch = ImagesBatch(1, data={'images': image[None]})
    batch.seed = 3
    out = make(batch).images[0]
    out = out[0] if out.ndim == 4 else out
    return np.repeat(out, 3, axis=2) if out.shape[2] == 1 else out


def plot_augmentations(digits: Digits, path: Path) -> list[list]:
    """Draw each augmentation of one image; returns each panel's title, shape and mean pixel value."""
    import matplotlib.pyplot as plt
    image, shown = sample_image(digits), []
    columns = 8
    rows = -(-len(AUGMENTATIONS) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(1.45 * columns, 1.8 * rows), dpi=60)
    for axes, (title, make) in zip(grid.ravel(), AUGMENTATIONS):
        panel = augmented(image, make)
        shown.append([title, list(panel.shape), float(panel.mean())])
        axes.imshow(panel, interpolation='nearest')
        axes.set_title(title, fontsize=6.5)
    for axes in grid.ravel():
        axes.set_axis_off()
    figure.tight_layout(pad=0.4, h_pad=1.2)
    figure.savefig(path)
    plt.close(figure)
    return shown


CURVE_LAYOUTS = {'one device': (None, None), '2 replicas': (['CPU:0', 'CPU:1'], None),
                 '2 replicas, microbatch 16 (pieces of 8)': (['CPU:0', 'CPU:1'], 16),
                 '2 replicas, microbatch 2 (pieces of 1)': (['CPU:0', 'CPU:1'], 2)}


def layout_losses(digits: Digits) -> dict[str, list[float]]:
    """Loss histories of a SimpleCNN with BatchNorm on Digits (2 epochs, batches of 64) in each layout."""
    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
              'initial_block/inputs': 'images', 'body/filters': (16, 32), 'device': C('device'),
              'microbatch': C('microbatch'), 'optimizer': {'name': 'Adam', 'lr': 1e-2}}
    template = (Pipeline()
                .init_variable('loss_history', [])
                .init_model('dynamic', SimpleCNN, 'cnn', config=config)
                .to_array()
                .multiply(1 / 255)
                .train_model('cnn', fetches='loss', images=B.images, labels=B.labels,
                             save_to=V('loss_history', mode='a')))
    found = {}
    for name, (device, microbatch) in CURVE_LAYOUTS.items():
        pipeline = template << digits.train << {'device': device, 'microbatch': microbatch}
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')             # the one-item pieces warn, as they should
            pipeline.run(64, shuffle=True, n_epochs=2, drop_last=True, seed=0)
        found[name] = pipeline.v('loss_history')
        pipeline.m('cnn').close()
    return found


def plot_layout_losses(found: dict[str, list[float]], path: Path) -> None:
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(6.4, 3.4), dpi=100)
    for (name, losses), style in zip(found.items(), ('-', '--', ':', '-')):
        window = 5
        smooth = np.convolve(losses, np.ones(window) / window, mode='valid')
        axes.plot(np.arange(window - 1, len(losses)), smooth, linestyle=style, linewidth=2, label=name)
    axes.set(xlabel='batch', ylabel='cross-entropy (mean of 5 batches)')
    axes.set_title('SimpleCNN with BatchNorm on Digits, batches of 64', fontsize=10)
    axes.legend(frameon=False, fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def training_run(digits: Digits) -> tuple[list[dict[str, str]], int]:
    """The rows of ``metrics.csv`` and the best epoch of the run in ``tutorials/08_training_run.ipynb``."""
    import csv
    import tempfile
    torch.manual_seed(0)
    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
              'initial_block/inputs': 'images', 'optimizer': {'name': 'SGD', 'lr': 0.05, 'momentum': 0.9}}
    train = (Pipeline()
             .init_model('net', SimpleCNN, config=config)
             .to_array().multiply(1 / 255)
             .train_model('net', images=B.images, labels=B.labels)) << digits.train
    val = (Pipeline()
           .import_model('net', train)
           .init_variable('predicted', []).init_variable('true', []).init_variable('losses', [])
           .to_array().multiply(1 / 255)
           .predict_model('net', images=B.images, fetches='labels', save_to=V('predicted', mode='e'))
           .predict_model('net', images=B.images, labels=B.labels, fetches='loss', save_to=V('losses', mode='a'))
           .update(V('true', mode='e'), B.labels)) << digits.test
    metrics = {'accuracy': lambda p: float(np.mean(np.array(p.v('predicted')) == np.array(p.v('true')))),
               'loss': lambda p: float(np.mean(p.v('losses')))}
    with tempfile.TemporaryDirectory() as folder:
        best = ModelCheckpoint(Path(folder) / 'best', monitor='val/accuracy', mode='max', save_top_k=2)
        train.run(64, n_epochs=60, shuffle=7, drop_last=True,
                  callbacks=[Validate(val, every='epoch', batch_size=120, metrics=metrics),
                             EarlyStopping(monitor='val/loss', mode='min', patience=3, min_delta=1e-3), best,
                             ReduceLROnPlateau('net', monitor='val/loss', factor=0.5, patience=1),
                             CSVLogger(Path(folder) / 'logs')])
        with open(Path(folder) / 'logs' / 'metrics.csv') as file:
            rows = list(csv.DictReader(file))
        best_epoch = int(Path(best.best_path).name.removeprefix('epoch-').removesuffix('.model'))
    train.m('net').close()
    return rows, best_epoch


TRAINING_RUN_CURVES = ('train/loss', 'val/loss', 'val/accuracy', 'lr')


def plot_training_run(rows: list[dict[str, str]], best_epoch: int, path: Path) -> None:
    import matplotlib.pyplot as plt
    # the plot of the notebook's last code cell, line for line
    epochs = [int(row['epoch']) for row in rows]
    figure, axes = plt.subplots(1, 4, figsize=(12, 2.6), dpi=72)
    for axis, name in zip(axes, TRAINING_RUN_CURVES):
        axis.plot(epochs, [float(row[name]) for row in rows], marker='.')
        axis.set_title(name)
        axis.set_xlabel('epoch')
    for axis in axes[:2]:
        axis.set_yscale('log')
    axes[2].axvline(best_epoch, color='gray', linestyle=':', label='best epoch')
    axes[2].legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


FIGURES = ('batch_split', 'replicas', 'loss_curves', 'loss_curve', 'batchnorm_shards', 'augmentations',
           'training_run')


def make(names: list[str], folder: Path = IMG) -> list[Path]:
    """Write the figures ``names`` (all when empty) into ``folder``; returns their paths."""
    unknown = sorted(set(names) - set(FIGURES))
    if unknown:
        raise ValueError(f"Expected figure names among {FIGURES}. Received: {unknown}.")
    import matplotlib
    matplotlib.use('Agg')
    names = list(names) or list(FIGURES)
    folder.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _make(names, folder, Digits())
    finally:
        torch.set_num_threads(threads)
    return [folder / f'{name}.png' for name in names]


def _draw(name: str, path: Path, digits: Digits) -> Any:
    """Draw the figure ``name`` into ``path``; returns what it shows (its record's data, JSON-ready)."""
    if name == 'batch_split':
        return plot_batch_split(path)
    if name == 'replicas':
        return plot_replicas(path)
    if name == 'augmentations':
        return plot_augmentations(digits, path)
    if name == 'loss_curves':
        found = {layout: [float(loss) for loss in losses] for layout, losses in layout_losses(digits).items()}
        plot_layout_losses(found, path)
        return found
    if name == 'loss_curve':
        losses = [float(loss) for loss in training_losses(digits)]
        plot_losses(losses, path)
        return losses
    if name == 'batchnorm_shards':
        found = layout_differences(digits)
        for batch_norm, values in found.items():
            print('batch_norm' if batch_norm else 'no batch norm', ['%.1e' % value for value in values])
        plot_differences(found, path)
        return {'with BatchNorm' if batch_norm else 'without BatchNorm': values for batch_norm, values in found.items()}
    rows, best_epoch = training_run(digits)
    plot_training_run(rows, best_epoch, path)
    return {'best_epoch': best_epoch, 'epochs': [int(row['epoch']) for row in rows],
            **{name: [float(row[name]) for row in rows] for name in TRAINING_RUN_CURVES}}


# the code that draws each figure: a change of it makes the stored figure stale (the data is compared apart)
DRAWN_BY = {'batch_split': (figure_diagrams,), 'replicas': (figure_diagrams,), 'loss_curves': (plot_layout_losses,),
            'loss_curve': (plot_losses,), 'batchnorm_shards': (plot_differences,),
            'augmentations': (plot_augmentations,), 'training_run': (plot_training_run,)}


def record(name: str, data: Any) -> dict[str, Any]:
    """What ``img/<name>.png`` keeps of itself: the data drawn and a digest of the code drawing it."""
    return {'figure': name, 'data': data, 'code': figure_record.digest(*map(inspect.getsource, DRAWN_BY[name]))}


def _make(names: list[str], folder: Path, digits: Digits) -> None:
    for name in names:
        path = folder / f'{name}.png'
        figure_record.stamp(path, record(name, _draw(name, path, digits)))


def main(argv: list[str]) -> None:
    folder = IMG
    if '--out' in argv:
        at = argv.index('--out')
        folder, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2:]
    try:
        paths = make(argv, folder)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    for path in paths:
        print(f'wrote {path}: {path.stat().st_size // 1024} KB')


if __name__ == '__main__':
    main(sys.argv[1:])
