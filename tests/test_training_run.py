"""The SPEC §8 program, as written: a complete training run with validation, early stopping, the best checkpoints,
plateau learning rates and loggers, on the shipped Digits data set. It runs once: as written where the optional
tensorboard package is installed (CI), else without its TensorBoardLogger."""
import importlib.util

import pytest

PROGRAM = """
import csv, os, tempfile
import numpy as np
from flowpipe import Pipeline, B, V, D
from flowpipe.opensets import Digits
from flowpipe.models.torch import SimpleCNN
from flowpipe.callbacks import (Validate, EarlyStopping, ModelCheckpoint, ReduceLROnPlateau,
                                CSVLogger, TensorBoardLogger)

digits, folder = Digits(), tempfile.mkdtemp()
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

def accuracy(p):                      # called after each validation run, on the validation pipeline
    return float(np.mean(np.array(p.v('predicted')) == np.array(p.v('true'))))

def mean_loss(p):
    return float(np.mean(p.v('losses')))

early = EarlyStopping(monitor='val/loss', mode='min', patience=3, min_delta=1e-3)
best = ModelCheckpoint(os.path.join(folder, 'best'), monitor='val/accuracy', mode='max', save_top_k=2)
train.run(64, n_epochs=60, shuffle=7, drop_last=True,
          callbacks=[Validate(val, every='epoch', batch_size=120, metrics={'accuracy': accuracy, 'loss': mean_loss}),
                     early, best, ReduceLROnPlateau('net', monitor='val/loss', factor=0.5, patience=1),
                     CSVLogger(os.path.join(folder, 'logs')), TensorBoardLogger(os.path.join(folder, 'tb'))])

rows = list(csv.DictReader(open(os.path.join(folder, 'logs', 'metrics.csv'))))   # one row per epoch, from 0
assert early.stopped_epoch is not None and len(rows) == early.stopped_epoch + 1 < 60
best_loss, wait, stop = float('inf'), 0, None                 # Keras's rule, recomputed from the log
for epoch, row in enumerate(rows):
    if float(row['val/loss']) < best_loss - 1e-3:
        best_loss, wait = float(row['val/loss']), 0
    else:
        wait += 1
        if wait >= 3:
            stop = epoch
            break
assert stop == early.stopped_epoch
assert best.best_score == max(float(row['val/accuracy']) for row in rows)
restored = SimpleCNN.from_file(best.best_path)                # the weights of the best epoch
assert {'epoch', 'step', 'train/loss', 'lr', 'val/accuracy', 'val/loss'} <= set(rows[0])
"""

# what the program leaves behind, checked after it in both forms
FILES = """
models = sorted(name for name in os.listdir(os.path.join(folder, 'best')) if name.endswith('.model'))
assert models == sorted(os.path.basename(path) for _, _, path in best.kept)
assert len(best.kept) == 2
"""

HAS_TENSORBOARD = importlib.util.find_spec('tensorboard') is not None


def _run(program):
    exec(compile(program, 'SPEC §8', 'exec'), {})


@pytest.mark.skipif(not HAS_TENSORBOARD, reason='tensorboard (the tensorboard extra) is not installed')
def test_spec_training_run_as_written():
    _run(PROGRAM + FILES)


@pytest.mark.skipif(HAS_TENSORBOARD, reason='tensorboard is installed: the program runs as written instead')
def test_spec_training_run_without_tensorboard():
    """The same program but its TensorBoardLogger, where the optional tensorboard package is absent."""
    without = PROGRAM.replace(", TensorBoardLogger(os.path.join(folder, 'tb'))", '').replace(
        ',\n                                CSVLogger, TensorBoardLogger)', ',\n                                CSVLogger)')
    assert 'TensorBoardLogger' not in without
    _run(without + FILES)
