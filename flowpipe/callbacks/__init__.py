"""Run callbacks: ``run(..., callbacks=[...])`` announces run start, batch ends, epoch ends and run end to them,
each with its ``logs``; ``Plateau`` is the one rule of every ``EarlyStopping`` and ``ReduceLROnPlateau``.

See docs/training.md for the epoch-end definition and each callback's rule.
"""
from .. import safe_pickle
from .base import Callback
from .csv_logger import CSVLogger
from .early_stopping import EarlyStopping
from .logger import Logger
from .model_checkpoint import ModelCheckpoint
from .plateau import Plateau
from .reduce_lr import ReduceLROnPlateau
from .tensorboard import TensorBoardLogger
from .trackers import MLflowLogger, WandbLogger
from .validate import Validate

safe_pickle.allow(EarlyStopping, Plateau)     # model files hold a config's model callbacks

__all__ = ['CSVLogger', 'Callback', 'EarlyStopping', 'Logger', 'MLflowLogger', 'ModelCheckpoint', 'Plateau',
           'ReduceLROnPlateau', 'TensorBoardLogger', 'Validate', 'WandbLogger']
assert __all__ == sorted(__all__)
