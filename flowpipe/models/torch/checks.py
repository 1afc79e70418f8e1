"""Checks a training step makes so that a run never goes wrong silently.

- ``BatchNormCheck``: a BatchNorm layer normalizes with the statistics of the items it sees. When a batch is cut
  into shards (``device``) or micro-batches (``microbatch``) smaller than ``BATCHNORM_MIN_ITEMS`` items, those
  statistics are noisy and training degrades; the check warns once per model, with the numbers and the fixes,
  before the step (a piece of one item makes torch's BatchNorm raise inside it; ``explain`` turns that error into
  one with the same numbers and fixes).
- ``LossCheck``: a step whose loss is ``nan`` or ``inf`` is skipped and counted by default (config
  ``nonfinite_loss``: ``'skip'``, the default, ``'raise'``, ``'warn'`` or ``'ignore'``), the first one reported
  with the batch number.
- ``InputCheck``: the items of every batch have the shapes the config declares (``inputs/<name>/shape``) and
  integer labels lie in ``[0, classes)`` (``inputs/<name>/classes``), so that a mismatch is an error naming the key,
  both values and the fix instead of a torch error deep inside the network or the loss.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import torch
from torch import nn

__all__ = ['BATCHNORM_MIN_ITEMS', 'BatchNormCheck', 'BatchNormShardWarning', 'InputCheck', 'LossCheck',
           'NONFINITE_MODES', 'NonFiniteLossWarning']

#: Shards and micro-batches with fewer items than this reaching a BatchNorm layer in training are warned about.
BATCHNORM_MIN_ITEMS = 8
NONFINITE_MODES = ('skip', 'raise', 'warn', 'ignore')


class BatchNormShardWarning(UserWarning):
    """BatchNorm layers see shards or micro-batches too small for reliable statistics."""


class NonFiniteLossWarning(RuntimeWarning):
    """A training step's loss is ``nan`` or ``inf``."""


def _batch_norm_layers(module: nn.Module) -> int:
    return sum(isinstance(layer, nn.modules.batchnorm._BatchNorm) and not isinstance(layer, nn.SyncBatchNorm)
               for layer in module.modules())


def _data_parts(plan: Any) -> int:
    """How many parts every global batch is split into over processes: the world's size, or its pipelines'
    count (1 for one pipeline), 1 in one process."""
    world, mesh = getattr(plan, 'world', None), getattr(plan, 'mesh', None)
    if world is None:
        return 1
    return world.size if mesh is None else mesh.data_size


class BatchNormCheck:
    """Warns once when the pieces a batch is cut into are too small for the network's BatchNorm layers.

    The pieces counted are the shards of the batch's first micro-batch chunk (a short last chunk is a remainder
    of the batch size, not the layout's choice); a batch that is not cut at all is never warned about, except in
    a distributed job that splits the global batch over its processes (or pipelines), where the batch a process
    trains on is already its shard of the global batch.
    """

    def __init__(self, module: nn.Module, plan: Any, min_items: int = BATCHNORM_MIN_ITEMS):
        self.layers = _batch_norm_layers(module)
        self.plan, self.min_items = plan, min_items
        self.done = self.layers == 0
        self._checked: set[int] = set()

    def smallest_piece(self, batch_size: int) -> int | None:
        """The fewest items in a piece of the first chunk, or ``None`` when the batch is one piece."""
        pieces = self.plan.pieces(batch_size) if batch_size else ()
        if not pieces or len(pieces) < 2 and _data_parts(self.plan) == 1:
            return None
        return min(piece.size for piece in pieces if piece.chunk == pieces[0].chunk)

    def __call__(self, batch_size: int) -> None:
        if self.done or batch_size in self._checked:
            return
        self._checked.add(batch_size)
        smallest = self.smallest_piece(batch_size)
        if smallest is None or smallest >= self.min_items:
            return
        self.done = True
        warnings.warn(self.message(batch_size, smallest), BatchNormShardWarning, stacklevel=3)

    def explain(self, error: ValueError, batch_size: int) -> None:
        """Raise a ``ValueError`` saying which piece and which fixes when ``error`` is torch's BatchNorm refusing
        a piece of one item in training; return otherwise (the caller re-raises ``error``)."""
        if 'more than 1 value per channel' not in str(error):
            return
        smallest = self.smallest_piece(batch_size) or batch_size
        raise ValueError(f"Expected more than one item per piece through BatchNorm in training. Received: "
                         f"{self.message(batch_size, smallest)}") from error

    def message(self, batch_size: int, smallest: int) -> str:
        """The warning's text: the numbers and the fixes."""
        plan = self.plan
        layout = []
        world = getattr(plan, 'world', None)
        if plan.num_replicas > 1:
            layout.append(f'{plan.num_replicas} replicas')
        if plan.microbatch is not None:
            layout.append(f'microbatch={plan.microbatch}')
        cut = f" cut by {' and '.join(layout)}" if layout else ''
        parts = _data_parts(plan)
        pipelined = world is not None and world.size != parts
        batch = (f'a batch of {batch_size}{cut}' if parts == 1 else
                 f"this process's shard of the global batch ({batch_size} items, 1 of {parts} "
                 f"{'pipelines' if pipelined else 'processes'}){cut}")
        return (f"BatchNorm on small pieces: {batch} puts as few as "
                f"{smallest} item{'s' if smallest != 1 else ''} through each of the network's {self.layers} "
                f"BatchNorm layer{'s' if self.layers != 1 else ''} (fewer than {self.min_items}); each piece is "
                "normalized with its own statistics, which are too noisy to train well. Fixes: a larger microbatch "
                "(or none), fewer devices or a larger batch, a batch-independent normalization (GroupNorm, "
                "LayerNorm; 'batch_norm': False for the ready networks), or, in a distributed job on GPUs, "
                "torch's SyncBatchNorm (nn.SyncBatchNorm.convert_sync_batchnorm(network) passed as 'model'). "
                "See docs/parallel.md, 'BatchNorm and other batch-dependent layers'.")


class LossCheck:
    """Applies a model's config ``nonfinite_loss`` to every training step whose full-batch loss (or, for
    ``'skip'`` and ``'raise'``, gradient: an inf input can give a finite loss) holds a nan or inf.

    - ``'skip'`` (the default): the engine skips the optimizer step, so the model stays as it was before the batch
      (as torch's ``GradScaler`` skips a step with non-finite gradients); the skipped steps are counted and the
      first one is warned about;
    - ``'raise'``: the step is skipped likewise, then a ``FloatingPointError`` stops the run;
    - ``'warn'``: the step is applied (the parameters may turn nan), the first one is warned about;
    - ``'ignore'``: the step is applied, nothing is checked.

    ``'skip'`` and ``'raise'`` decide before the step, ``'warn'`` after it: each reads the loss, one host
    synchronization per step; ``'ignore'`` reads nothing (the loss stays on the device unless fetched).
    """

    def __init__(self, mode: Any = 'skip'):
        mode = 'skip' if mode is None else mode
        if mode not in NONFINITE_MODES:
            raise ValueError(f"Expected nonfinite_loss in {NONFINITE_MODES}. Received: nonfinite_loss={mode!r}. "
                             "'skip' (the default) leaves the model as it was before such a batch.")
        self.mode = mode
        self.first: int | None = None
        self.skipped = 0

    @property
    def skips(self) -> bool:
        """Whether the engine is to skip the step of a non-finite loss (``skip_nonfinite``)."""
        return self.mode in ('skip', 'raise')

    def __call__(self, result: Any, iteration: int) -> None:
        """Check the ``StepResult`` of training batch number ``iteration`` (1 for the model's first batch)."""
        if self.mode == 'ignore':
            return
        if self.skips:
            if result.stepped:
                return
            loss = float(result.loss)
            if self.mode == 'raise':
                raise FloatingPointError(self._text(loss, iteration) + " The step was skipped: the model is as it "
                                         "was before this batch. Set 'nonfinite_loss': 'skip' to skip such "
                                         "batches and train on.")
            self.skipped += 1
            self._warn_once(loss, iteration, " The optimizer step was skipped (the model is as it was before this "
                                             "batch); skipped steps are counted in the model's skipped_steps.")
            return
        loss = float(result.loss)
        if not math.isfinite(loss):
            self._warn_once(loss, iteration, " The step was applied: the parameters may hold nan now. Use "
                                             "'nonfinite_loss': 'skip' (the default) to skip such steps.")

    def _warn_once(self, loss: float, iteration: int, what: str) -> None:
        if self.first is None:
            self.first = iteration
            warnings.warn(self._text(loss, iteration) + what + " Set 'nonfinite_loss': 'raise' in the model config "
                          "to stop at the first one. Warned once per model.", NonFiniteLossWarning, stacklevel=4)

    @staticmethod
    def _text(loss: float, iteration: int) -> str:
        where = '' if not math.isfinite(loss) else ' and a gradient holding nan or inf'
        return (f"Expected a finite training loss and gradient. Received: loss={loss}{where} at the model's training "
                f"batch {iteration}. "
                "Common causes: a nan or inf in the inputs, a learning rate too high, inputs not scaled (e.g. "
                "images in 0-255), log of zero in a custom loss; 'clip_grad_norm' can help.")


class InputCheck:
    """Checks a batch's tensors against the shapes and classes the config declared when the model was made.

    Shapes are checked at every step (no data is read); an empty batch (an idle rank's shard) has no item to check. Integer labels of a target with classes are checked to
    lie in ``[0, classes)`` (the loss's ``ignore_index`` allowed) at every step while they are on the CPU, and at
    the first step only once they come on a GPU (reading them there waits for the device). Labels of a loss that
    compares values (``'bce'``, ``'mse'``...) are not class indices and are not range-checked.

    Args:
        shapes: ``{name: shape of one item}`` as declared (``ModelSpec.shapes``).
        classes: ``{name: number of classes}`` as declared (``ModelSpec.classes``).
    """

    def __init__(self, shapes: dict, classes: dict):
        self.shapes, self.classes = dict(shapes), dict(classes)
        self._device_labels_checked = False

    def __call__(self, tensors: dict[str, torch.Tensor], loss_fn: Any = None) -> None:
        """Raise a ``ValueError`` for the first tensor of ``{name: tensor}`` that does not fit the config."""
        for name, tensor in tensors.items():
            shape = self.shapes.get(name)
            # an empty shard (an idle rank's) holds no item to check: its shape is whatever an empty array got
            if shape is not None and tensor.dim() and tensor.shape[0] and tuple(tensor.shape[1:]) != shape:
                raise ValueError(self._shape_text(name, shape, tuple(tensor.shape)))
            if name in self.classes and self._indexes(tensor, loss_fn):
                self._check_labels(name, tensor, getattr(getattr(loss_fn, 'loss', loss_fn), 'ignore_index', None))

    def _indexes(self, tensor: torch.Tensor, loss_fn: Any) -> bool:
        if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool or not tensor.numel():
            return False
        if getattr(loss_fn, 'float_targets', False):      # a value-comparing loss: targets are values
            return False
        return tensor.device.type == 'cpu' or not self._device_labels_checked

    def _check_labels(self, name: str, labels: torch.Tensor, ignore_index: Any) -> None:
        if labels.device.type != 'cpu':
            self._device_labels_checked = True
        classes = self.classes[name]
        low, high = (int(value) for value in torch.aminmax(labels))
        if low >= 0 and high < classes:             # the common case: one pass, no mask
            return
        if ignore_index is not None:
            labels = labels[labels != ignore_index]
            if not labels.numel():
                return
            low, high = (int(value) for value in torch.aminmax(labels))
            if low >= 0 and high < classes:
                return
        fix = (f"or set 'inputs/{name}/classes' to {high + 1} if there are that many classes" if low >= 0 else
               "(e.g. codes = np.unique(labels, return_inverse=True)[1])")
        raise ValueError(f"Expected {name!r} labels in [0, {classes}) ('inputs/{name}/classes': {classes}). "
                         f"Received: labels from {low} to {high}. Encode the labels as 0..{classes - 1}, {fix}.")

    @staticmethod
    def _shape_text(name: str, shape: tuple, received: tuple) -> str:
        return (f"Expected {name!r} items of shape {shape} ('inputs/{name}/shape': {shape}). Received: a batch of "
                f"shape {received}, items of shape {received[1:]}. Bring the items to that shape (e.g. resize(), "
                f"to_array(channels='first')), or declare 'inputs/{name}/shape': {received[1:]} (e.g. "
                "B.image_shape, read from the batch).")
