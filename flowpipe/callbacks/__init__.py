"""Run callbacks: ``run(..., callbacks=[...])`` announces run start, batch ends, epoch ends and run end to them.

See docs/training.md for the epoch-end definition and each callback's rule.
"""
from .base import Callback
from .csv_logger import CSVLogger
from .early_stopping import EarlyStopping
from .model_checkpoint import ModelCheckpoint
from .reduce_lr import ReduceLROnPlateau
from .tensorboard import TensorBoardLogger
from .validate import Validate

__all__ = ['CSVLogger', 'Callback', 'EarlyStopping', 'ModelCheckpoint', 'ReduceLROnPlateau', 'TensorBoardLogger',
           'Validate']
assert __all__ == sorted(__all__)
