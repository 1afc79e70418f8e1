"""Cells of 08_training_run.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 08. A complete training run

A training run is more than its steps: the model is validated after each epoch, the run stops when the validation
loss stops improving, the best epochs' weights are kept, the learning rate drops on a plateau, and the values go
to a CSV file and to TensorBoard. `run(..., callbacks=[...])` hands each of these to a small object from
`flowpipe.callbacks` that listens to the run's epoch ends (`docs/training.md` has every rule). This tutorial
trains a small CNN on `Digits` that way, then checks each callback's work from the files it wrote. It runs in
seconds on one CPU thread."""),
    ('code', """
import csv
import glob
import os
import tempfile

import numpy as np
import torch

from flowpipe import B, D, V, Pipeline
from flowpipe.callbacks import (CSVLogger, EarlyStopping, ModelCheckpoint, ReduceLROnPlateau, TensorBoardLogger,
                                Validate)
from flowpipe.models.torch import SimpleCNN
from flowpipe.opensets import Digits

torch.manual_seed(0)
digits, folder = Digits(), tempfile.mkdtemp()"""),
    ('md', """
## A training pipeline and a validation pipeline

The validation pipeline shares the trained model (`import_model` takes the object, not a copy) and collects, for
the test set, the predicted labels, the true labels and the loss of each batch. A validation run starts from the
declared variables each time."""),
    ('code', """
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

def accuracy(pipeline):          # called on the validation pipeline after each of its runs
    return float(np.mean(np.array(pipeline.v('predicted')) == np.array(pipeline.v('true'))))

def mean_loss(pipeline):
    return float(np.mean(pipeline.v('losses')))"""),
    ('md', """
## The run and its callbacks

- `Validate` runs `val` at each epoch end and logs `val/accuracy` and `val/loss`;
- `EarlyStopping` stops the run once `val/loss` has not improved by more than `min_delta` for `patience` epochs
  (Keras's rule);
- `ModelCheckpoint` keeps the files of the 2 epochs with the best `val/accuracy`;
- `ReduceLROnPlateau` halves the learning rate when `val/loss` has not improved for more than one epoch
  (torch's rule);
- `CSVLogger` and `TensorBoardLogger` record every epoch's values: `epoch`, `step`, `train/loss` (the mean of the
  epoch's steps), `lr` (the rate the epoch trained with) and the `val/...` values.

Validation comes first and the loggers last at each epoch end whatever the list's order, so the deciding
callbacks and the loggers see the epoch's validation. `n_epochs=60` is only an upper bound."""),
    ('code', """
early = EarlyStopping(monitor='val/loss', mode='min', patience=3, min_delta=1e-3)
best = ModelCheckpoint(os.path.join(folder, 'best'), monitor='val/accuracy', mode='max', save_top_k=2)
plateau = ReduceLROnPlateau('net', monitor='val/loss', factor=0.5, patience=1)
train.run(64, n_epochs=60, shuffle=7, drop_last=True,
          callbacks=[Validate(val, every='epoch', batch_size=120, metrics={'accuracy': accuracy, 'loss': mean_loss}),
                     early, best, plateau,
                     CSVLogger(os.path.join(folder, 'logs')), TensorBoardLogger(os.path.join(folder, 'tb'))])
print(f"stopped after epoch {early.stopped_epoch} of at most 60")"""),
    ('md', """
## `metrics.csv`: one row per epoch

`CSVLogger` rewrites the file atomically at each epoch end, so even an interrupted run leaves a complete file. Its
first column, `run`, marks the run that logged each row: a later run into the same folder appends its rows under
its own mark. This folder is new, so every row is this run's."""),
    ('code', """
with open(os.path.join(folder, 'logs', 'metrics.csv')) as file:
    rows = list(csv.DictReader(file))
assert len({row.pop('run') for row in rows}) == 1
print(' '.join(f'{name:>12}' for name in rows[0]))
for row in rows:
    print(' '.join(f'{float(value):12.4g}' for value in row.values()))"""),
    ('md', """
## Early stopping, recomputed from the log

An epoch improves when its `val/loss` is below the best so far by more than `min_delta`; otherwise the count of
epochs waited grows, and the run stops at the epoch where it reaches `patience`. The same rule applied to the
logged values finds the epoch where the run stopped."""),
    ('code', """
best_loss, wait, keras_stop = float('inf'), 0, None
for epoch, row in enumerate(rows):
    if float(row['val/loss']) < best_loss - 1e-3:
        best_loss, wait = float(row['val/loss']), 0
    else:
        wait += 1
        if wait >= 3:
            keras_stop = epoch
            break
print(f"the rule stops at epoch {keras_stop}; EarlyStopping stopped at epoch {early.stopped_epoch}; "
      f"{len(rows)} rows")"""),
    ('md', """
## The best checkpoint

The folder holds the files of the two best epochs by `val/accuracy` (a tie keeps the earlier epoch);
`best_path` is the best one. `SimpleCNN.from_file` loads it as a new model, on its own: evaluated on the test set
it has the accuracy that epoch was validated with, not the last epoch's."""),
    ('code', """
kept = sorted(glob.glob('*.model', root_dir=os.path.join(folder, 'best')))   # beside them, the folder's ledger
print(kept, 'best:', os.path.basename(best.best_path), f'val/accuracy {best.best_score:.4f}')
best_epoch = int(os.path.basename(best.best_path).removeprefix('epoch-').removesuffix('.model'))

restored = SimpleCNN.from_file(best.best_path)
test = digits.test.create_batch(digits.test.indices).to_array().multiply(1 / 255)
restored_accuracy = float(np.mean(restored.predict(images=test.images, fetches='labels') == test.labels))
print(f"the restored model's test accuracy: {restored_accuracy:.4f}")"""),
    ('md', """
## The learning rate on a plateau

`lr` in a row is the rate the epoch trained with: after an epoch that makes the count of epochs without
improvement exceed `patience`, `ReduceLROnPlateau` sets the optimizer's rate to half, and the next row shows it."""),
    ('code', """
rates = [float(row['lr']) for row in rows]
changes = [(epoch, rates[epoch - 1], rates[epoch]) for epoch in range(1, len(rates))
           if rates[epoch] != rates[epoch - 1]]
for epoch, before, after in changes:
    print(f"epoch {epoch} trained with lr {after:g} (was {before:g})")
print('the optimizer now:', train.m('net').optimizer.param_groups[0]['lr'])"""),
    ('md', """
## TensorBoard

`TensorBoardLogger` writes the same values as scalars at step `epoch` (`tensorboard --logdir <folder>/tb` shows
them). tensorboard's own event reader reads them back from the folder's event file."""),
    ('code', """
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

tb = os.path.join(folder, 'tb')
print(['.'.join(name.split('.')[:3]) + '.<time>.<host>...' for name in os.listdir(tb)])
events = EventAccumulator(tb)
events.Reload()
print(sorted(events.Tags()['scalars']))
tb_accuracy = [(scalar.step, scalar.value) for scalar in events.Scalars('val/accuracy')]
print(tb_accuracy[:3], '...')
# TensorBoard keeps scalars in float32: the CSV's values, rounded so
tb_matches_csv = tb_accuracy == [(epoch, float(np.float32(row['val/accuracy']))) for epoch, row in enumerate(rows)]
tb_matches_csv"""),
    ('md', """
## The curves, from `metrics.csv`

Any plotting library reads the file; with matplotlib:"""),
    ('code', """
import matplotlib.pyplot as plt

epochs = [int(row['epoch']) for row in rows]
figure, axes = plt.subplots(1, 4, figsize=(12, 2.6), dpi=72)
for axis, name in zip(axes, ['train/loss', 'val/loss', 'val/accuracy', 'lr']):
    axis.plot(epochs, [float(row[name]) for row in rows], marker='.')
    axis.set_title(name)
    axis.set_xlabel('epoch')
for axis in axes[:2]:
    axis.set_yscale('log')
axes[2].axvline(best_epoch, color='gray', linestyle=':', label='best epoch')
axes[2].legend()
figure.tight_layout()"""),
    ('md', """
![The curves of this run](../img/training_run.png)

The training loss keeps falling while the validation loss levels off: that plateau halved the learning rate, then
stopped the run; the best accuracy came early, and its checkpoint is the one kept. (The figure is made by
`tutorials/make_figures.py` from the same run's `metrics.csv`.)"""),
]
