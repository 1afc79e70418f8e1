"""Loss normalization: a loss is a sum over the batch divided by a normalizer counted once on the whole batch.

A batch split into pieces (replica shards, micro-batches, rank shards) gives the full-batch loss and gradient
exactly when every piece adds its unnormalized sum divided by the *whole batch's* normalizer. A per-item mean
is the case where the normalizer is the number of items; there each piece's mean weighted by its share of the
items is the same thing, which is what the engines do for a loss whose normalization they do not know.

A loss declares its normalization by two methods (``NormalizedLoss``, or any object with both):

- ``sum(outputs, *targets)``: the unnormalized sum over the items it is given (a piece);
- ``normalizer(*targets)``: the normalizer of the items it is given (called on the whole batch, before it is split).

Calling it gives ``sum / normalizer``: a batch with nothing to count gives ``nan``, as torch's mean does.
``torch_normalized(module)`` gives torch's own losses this form (``TORCH_NORMALIZERS`` lists them), and
``normalized(loss_fn)`` finds the form of any loss, or ``None`` for one flowpipe cannot place. Cross-entropy and
NLL also take a language model's ``(B, T, V)`` outputs with ``(B, T)`` targets (``TorchLoss._sequence``).
"""
from __future__ import annotations

import copy
import math
import weakref
from typing import Any, Callable, Sequence

import torch
from torch import nn

from .split import Piece

__all__ = ['ELEMENTS', 'ITEMS', 'ITEM_SHARES', 'NORMALIZER', 'NormalizedLoss', 'PLAIN_SUM', 'StepLoss',
           'TORCH_NORMALIZERS', 'TorchLoss', 'describe_loss', 'normalized', 'normalizer_value', 'torch_normalized',
           'weighting']

ITEMS = 'the items'
ELEMENTS = 'the elements of the target'
_VALID = 'the targets not equal to ignore_index'
_WEIGHTED = 'the class weights of the targets not equal to ignore_index'
_POSITIONS = 'the items times positions (the target without its class dimension)'
_SUM = '1 (reduction=\'sum\')'


class NormalizedLoss:
    """A loss that is ``sum(outputs, *targets) / normalizer(*targets)``; subclass it and write both methods.

    ``normalizer`` sees only the targets and is called once per step on the whole batch (in a distributed job on
    every rank's shard, and the ranks' normalizers are added), ``sum`` on each piece; an empty piece's sum must be
    0 (a masked sum is). The normalizer must be a finite number > 0, 0 only for no items (``ValueError``
    otherwise: a negative one would make the model climb its loss). Example, a mean over the valid entries of a mask::

        class MaskedMSE(NormalizedLoss):
            def sum(self, outputs, target, mask):
                return ((outputs - target) ** 2 * mask).sum()

            def normalizer(self, target, mask):
                return mask.sum()

    The normalizer adds up over the items: a batch's is the sum of its pieces' (a count, a sum of weights), so
    the ranks of a distributed job add theirs. Two kinds of loss say so instead of counting:

    Attributes:
        per_item: the normalizer is the number of items and ``__call__`` the mean over the items: the engines
            then weight each piece's loss by its share of the items and count nothing.
        plain_sum: the loss is a plain sum (``normalizer`` gives 1 for any batch, which does not add up): each
            piece adds its sum as it is.
        normalizer_name: what the normalizer counts, for the device plan.
    """

    per_item: bool = False
    plain_sum: bool = False
    normalizer_name: str = 'normalizer()'

    def sum(self, outputs: Any, *targets: torch.Tensor) -> torch.Tensor:
        """The unnormalized sum of the loss over the items given."""
        raise NotImplementedError(f'Expected {type(self).__name__} to define sum(outputs, *targets).')

    def normalizer(self, *targets: torch.Tensor) -> torch.Tensor | float:
        """The normalizer of the items given (a number, or a 0-dim tensor)."""
        raise NotImplementedError(f'Expected {type(self).__name__} to define normalizer(*targets).')

    def __call__(self, outputs: Any, *targets: torch.Tensor) -> torch.Tensor:
        items = _items(targets[0]) if targets else 1
        return self.sum(outputs, *targets) / checked_normalizer(self, self.normalizer(*targets), items)


def _items(target: torch.Tensor) -> int:
    return int(target.shape[0]) if target.dim() else 1


def _classes(loss: nn.Module, target: torch.Tensor) -> torch.Tensor | int:
    """Cross-entropy and NLL: class indices count the (weighted) valid targets, class probabilities the items
    times positions; ``label_smoothing`` keeps the normalizer (torch divides both of its terms by it)."""
    if target.is_floating_point():          # probabilities: a weighted sum over classes, a mean over positions
        return target.numel() // target.shape[1] if target.dim() > 1 else 1
    weight = loss.weight
    valid = target != loss.ignore_index
    if weight is None:
        return valid.sum()
    valid = valid.to(weight.device)         # counted where the weights are: no copy of them, no synchronization
    return (weight[target.to(weight.device).masked_fill(~valid, 0)] * valid).sum()


#: torch loss classes whose ``reduction='mean'`` is a mean over the elements of the target
_ELEMENT_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss, nn.BCELoss, nn.BCEWithLogitsLoss,
                   nn.PoissonNLLLoss, nn.GaussianNLLLoss, nn.SoftMarginLoss, nn.HingeEmbeddingLoss,
                   nn.MarginRankingLoss)
#: torch loss classes whose ``reduction='mean'`` is a mean over the items (of a per-item value)
_ITEM_LOSSES = (nn.MultiLabelSoftMarginLoss, nn.MultiLabelMarginLoss, nn.MultiMarginLoss, nn.CosineEmbeddingLoss,
                nn.TripletMarginLoss, nn.TripletMarginWithDistanceLoss, nn.CTCLoss)

#: ``{torch loss class: what its reduction='mean' divides by}``, for the documentation and the plan
TORCH_NORMALIZERS = {nn.CrossEntropyLoss: f'{_VALID}; with weight=, {_WEIGHTED}; with probabilities, {_POSITIONS}',
                     nn.NLLLoss: f'{_VALID}; with weight=, {_WEIGHTED}',
                     nn.KLDivLoss: f"{ELEMENTS}; with reduction='batchmean', {ITEMS}",
                     **{cls: ELEMENTS for cls in _ELEMENT_LOSSES}, **{cls: ITEMS for cls in _ITEM_LOSSES}}


def _rule(loss: nn.Module) -> str | None:
    """What ``loss`` divides its sum by; ``None``: not a loss flowpipe places (an unknown class, a subclass that
    may compute otherwise, ``reduction='none'``)."""
    cls, reduction = type(loss), getattr(loss, 'reduction', None)
    if cls not in TORCH_NORMALIZERS or reduction not in ('mean', 'sum', 'batchmean'):
        return None
    if reduction == 'sum':
        return _SUM
    if cls in (nn.CrossEntropyLoss, nn.NLLLoss):
        return _VALID if loss.weight is None else _WEIGHTED
    return ITEMS if cls in _ITEM_LOSSES or reduction == 'batchmean' else ELEMENTS


_CLASS_LOSSES = (nn.CrossEntropyLoss, nn.NLLLoss)


class TorchLoss(NormalizedLoss):
    """A torch loss module in the normalized form: ``sum`` is the module with ``reduction='sum'``, ``normalizer``
    what its mean divides by (``TORCH_NORMALIZERS``); calling it calls the module itself.

    The module's options (``reduction``, ``weight``, ``ignore_index``...) are read when it is wrapped.

    Args:
        loss: a torch loss module of a class in ``TORCH_NORMALIZERS`` (``torch_normalized`` checks).
        float_targets: cast the targets to the outputs' dtype first (for losses that compare values, so
            integer targets can stay integer in the data).
    """

    def __init__(self, loss: nn.Module, float_targets: bool = False):
        rule = _rule(loss)
        if rule is None:
            raise ValueError(f'Expected a torch loss of a class in TORCH_NORMALIZERS with reduction mean, sum or '
                             f'batchmean. Received: {loss!r}. Use torch_normalized(loss), which gives None there.')
        self.loss, self.float_targets, self.normalizer_name = loss, float_targets, rule
        self.per_item, self.plain_sum = self.normalizer_name == ITEMS, self.normalizer_name == _SUM
        self._summed = copy.copy(loss)          # shares the module's tensors (weight) and options
        self._summed.reduction = 'sum'

    def _targets(self, outputs: Any, targets: Sequence[torch.Tensor]) -> Sequence[torch.Tensor]:
        return [target.to(outputs.dtype) for target in targets] if self.float_targets else targets

    def _sequence(self, outputs: Any, targets: Sequence[torch.Tensor]) -> tuple[Any, Sequence[torch.Tensor]]:
        """Class-index targets ``(B, T, ...)`` with outputs ``(B, T, ..., C)``, classes last as language models
        give them, flattened to ``(B * T * ..., C)`` and ``(B * T * ...)`` (the same sum, the same count of valid
        targets); torch's own layout ``(B, C, T, ...)`` wins where both fit (``C`` equal to ``T``)."""
        if not targets or not isinstance(outputs, torch.Tensor) or not isinstance(self.loss, _CLASS_LOSSES):
            return outputs, targets
        target = targets[0]
        if (outputs.dim() >= 3 and outputs.dim() == target.dim() + 1 and not target.is_floating_point()
                and outputs.shape[:-1] == target.shape and outputs.shape[2:] != target.shape[1:]):
            return outputs.reshape(-1, outputs.shape[-1]), [target.reshape(-1), *targets[1:]]
        return outputs, targets

    def sum(self, outputs: Any, *targets: torch.Tensor) -> torch.Tensor:
        outputs, targets = self._sequence(outputs, targets)
        return self._summed(outputs, *self._targets(outputs, targets))

    def normalizer(self, *targets: torch.Tensor) -> torch.Tensor | int:
        rule, target = self.normalizer_name, targets[0]
        if rule == _SUM:
            return 1
        if rule == ITEMS:
            return _items(target)
        return target.numel() if rule == ELEMENTS else _classes(self.loss, target)

    def __call__(self, outputs: Any, *targets: torch.Tensor) -> torch.Tensor:
        outputs, targets = self._sequence(outputs, targets)
        return self.loss(outputs, *self._targets(outputs, targets))

    def __repr__(self) -> str:
        return repr(self.loss)


def torch_normalized(loss: nn.Module, float_targets: bool = False) -> TorchLoss | None:
    """``TorchLoss(loss)`` for a torch loss flowpipe can place, else ``None``."""
    return None if _rule(loss) is None else TorchLoss(loss, float_targets)


_WRAPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_UNSEEN = object()


def normalized(loss_fn: Any) -> Any:
    """The normalized form of ``loss_fn``: itself when it has ``sum`` and ``normalizer`` methods (a
    ``NormalizedLoss``), a ``TorchLoss`` for a torch loss module flowpipe can place (made once per module), else
    ``None``: a loss flowpipe cannot place, whose pieces are weighted by their share of the items."""
    if isinstance(loss_fn, NormalizedLoss):     # first: the cheapest test, and the loss of every TorchModel
        return loss_fn
    if type(loss_fn) in TORCH_NORMALIZERS:
        form = _WRAPPED.get(loss_fn, _UNSEEN)
        if form is _UNSEEN:
            form = _WRAPPED[loss_fn] = torch_normalized(loss_fn)
        return form
    if callable(getattr(loss_fn, 'normalizer', None)) and callable(getattr(loss_fn, 'sum', None)):
        return loss_fn
    return None


ITEM_SHARES, PLAIN_SUM, NORMALIZER = 'item shares', 'plain sum', 'normalizer'


def weighting(form: Any) -> str:
    """How the pieces of a loss in normalized ``form`` (``normalized``) are weighted: ``ITEM_SHARES`` (each
    piece's value by its share of the items: a loss flowpipe cannot place, or a per-item mean), ``PLAIN_SUM``
    (each piece's sum as it is) or ``NORMALIZER`` (each piece's sum divided by the whole batch's normalizer)."""
    if form is None or getattr(form, 'per_item', False):
        return ITEM_SHARES
    return PLAIN_SUM if getattr(form, 'plain_sum', False) else NORMALIZER


def checked_normalizer(form: Any, value: Any, items: int) -> Any:
    """``value``, the normalizer ``form`` gave for ``items`` items, once it is a finite number, positive unless
    there are no items (a user's loss; torch's own may count 0 where every target is ignored, and give NaN as
    torch does); a tensor on a GPU is not read (that would wait for the device)."""
    if isinstance(value, torch.Tensor):
        if value.device.type != 'cpu' or value.numel() != 1:
            return value
        number = value.item()
    else:
        number = value
    user = not isinstance(form, TorchLoss)
    try:
        number = float(number)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0 or (
            user and items and number == 0):
        raise ValueError(f'Expected the normalizer of {type(form).__name__} to be a finite number > 0 (0 only for '
                         f'no items): the loss is its sum divided by it. Received: normalizer={number!r} for '
                         f'{items} items. Fix its normalizer(*targets).')
    return value


def normalizer_value(value: Any) -> float | torch.Tensor:
    """A normalizer as the engines divide by it: a number, read from a CPU tensor (no device synchronization);
    a tensor on a GPU stays there (reading it would wait for the device)."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.device.type == 'cpu' else value
    return value


class StepLoss:
    """What every piece of one training step computes, and its weighting.

    ``normalizer`` ``None``: each piece calls ``fn`` (a mean over the piece's items, or the loss of the whole
    batch in one piece) and weights it by its share of the items (``piece.weight``); otherwise each piece calls
    ``fn`` (an unnormalized sum) and divides by ``normalizer``, the whole batch's: an empty piece adds 0.
    """

    __slots__ = ('fn', 'normalizer')

    def __init__(self, fn: Callable, normalizer: float | torch.Tensor | None = None):
        self.fn, self.normalizer = fn, normalizer

    def weigh(self, loss: torch.Tensor, piece: Piece) -> torch.Tensor:
        """The piece's share of the whole batch's loss."""
        normalizer = self.normalizer
        if normalizer is None:          # a whole batch in one piece: multiplying by one is exact, and wasted work
            return loss if piece.weight == 1.0 else loss * piece.weight
        if isinstance(normalizer, torch.Tensor) and normalizer.device != loss.device:
            normalizer = normalizer.to(loss.device)     # counted on one GPU, a replica on another
        return loss / normalizer


def describe_loss(loss_fn: Any) -> tuple[str | None, str | None]:
    """For the device plan: what each piece's loss is divided by (``None``: its share of the items) and, for a loss
    flowpipe cannot place, the one line that says so."""
    form = normalized(loss_fn)
    if form is None:
        name = getattr(loss_fn, '__name__', type(loss_fn).__name__)
        if getattr(loss_fn, 'whole_batch', None):       # a ratio of sums, as Dice: no normalizer makes it exact
            return None, (f'loss {name}: {loss_fn.whole_batch}: exact on a whole batch in one piece; split '
                          f'(devices, micro-batches, ranks), each piece\'s value is weighted by its share of the items')
        if getattr(loss_fn, 'per_item', False) is True:     # declared a mean over items: item shares are exact
            return None, None
        return None, (f'loss {name}: its normalization is not declared, so each piece is weighted by its share of '
                      f'the items: exact only if the loss is a mean over items (declare sum() and normalizer(), '
                      f'docs/parallel.md, "Losses")')
    if weighting(form) == ITEM_SHARES:
        return None, None
    return getattr(form, 'normalizer_name', _SUM if weighting(form) == PLAIN_SUM else 'normalizer()'), None
