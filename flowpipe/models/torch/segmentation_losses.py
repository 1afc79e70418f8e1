"""batchflow's segmentation losses by name: ``'dice'``, ``'bdice'``, ``'btversky'``, ``'lovasz'``, ``'blovasz'``
and ``'ssim'`` (``'loss': 'dice'`` or ``{'name': 'btversky', 'alpha': 0.3, 'beta': 0.7}``).

Outputs are logits: the binary losses (``b...``) take a sigmoid of them and targets of 0 and 1 of the same shape,
the multi-class ones a softmax over dimension 1 and class indices (``(N, ...)`` or ``(N, 1, ...)``).

How the engines may split a batch (``docs/parallel.md``, "Losses"): Dice, Tversky and the batch-wide Lovász losses
are ratios of sums over the whole batch, not sums over items, so no per-piece normalizer makes them exact; they say
so (``whole_batch``) and the device plan prints it: on one piece (one device, no micro-batches) they are exact, on
split batches each piece's value is weighted by its share of the items. ``ssim`` and the Lovász losses with
``per_image=True`` are means over items of a per-item value (``per_item``): exact on any layout.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ...parallel.losses import NormalizedLoss

__all__ = ['SEGMENTATION_LOSSES', 'SSIM', 'BinaryDice', 'BinaryLovasz', 'BinaryTversky', 'Dice', 'Lovasz']

_RATIO = 'a ratio of sums over the whole batch, not a sum over items'


def _one_hot(outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Class indices ``(N, ...)`` or ``(N, 1, ...)`` as a one-hot tensor shaped like ``outputs`` ``(N, C, ...)``."""
    if target.dim() == outputs.dim():
        target = target.squeeze(1)
    if target.shape != outputs.shape[:1] + outputs.shape[2:]:
        raise ValueError(f"Expected class indices shaped (N, ...) or (N, 1, ...) for outputs {tuple(outputs.shape)}."
                         f" Received: target of shape {tuple(target.shape)}. Give one class index per position.")
    return F.one_hot(target.long(), outputs.shape[1]).movedim(-1, 1).to(outputs.dtype)


class BinaryDice(nn.Module):
    """``1 - 2 sum(p t) / (sum(p) + sum(t) + eps)`` over the whole batch, ``p`` the sigmoid of the outputs."""

    whole_batch = _RATIO

    def __init__(self, eps: float = 1e-7, apply_sigmoid: bool = True):
        super().__init__()
        self.eps, self.apply_sigmoid = eps, apply_sigmoid

    def forward(self, outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        proba = torch.sigmoid(outputs) if self.apply_sigmoid else outputs
        target = target.to(proba.dtype).reshape(proba.shape)
        return 1 - 2 * (proba * target).sum() / (proba.sum() + target.sum() + self.eps)


class BinaryTversky(BinaryDice):
    """``1 - TP / (TP + alpha FP + beta FN + eps)`` over the whole batch (soft counts of the sigmoid); ``alpha =
    beta = 0.5`` is the Dice loss, ``alpha = beta = 1`` the Jaccard loss."""

    def __init__(self, alpha: float = 1.0, beta: float = 1.0, eps: float = 1e-7, apply_sigmoid: bool = True):
        super().__init__(eps, apply_sigmoid)
        self.alpha, self.beta = alpha, beta

    def forward(self, outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        proba = torch.sigmoid(outputs) if self.apply_sigmoid else outputs
        target = target.to(proba.dtype).reshape(proba.shape)
        true_pos = (proba * target).sum()
        false_pos, false_neg = (proba * (1 - target)).sum(), ((1 - proba) * target).sum()
        return 1 - true_pos / (true_pos + self.alpha * false_pos + self.beta * false_neg + self.eps)


class Dice(nn.Module):
    """Multi-class soft Dice: ``1 - mean over classes of 2 sum(p_c t_c) / (sum(p_c) + sum(t_c) + eps)``, sums
    over the batch and positions, ``p`` the softmax of the outputs over dimension 1."""

    whole_batch = _RATIO

    def __init__(self, eps: float = 1e-7):
        super().__init__()
        self.eps = eps

    def forward(self, outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        proba, hot = torch.softmax(outputs, dim=1), _one_hot(outputs, target)
        dims = (0, *range(2, outputs.dim()))
        dice = 2 * (proba * hot).sum(dims) / (proba.sum(dims) + hot.sum(dims) + self.eps)
        return 1 - dice.mean()


def _lovasz_grad(sorted_truth: torch.Tensor) -> torch.Tensor:
    """The gradient of the Lovász extension of the Jaccard loss at errors sorted in decreasing order."""
    total = sorted_truth.sum()
    intersection = total - sorted_truth.cumsum(0)
    union = total + (1 - sorted_truth).cumsum(0)
    jaccard = 1 - intersection / union
    return torch.cat([jaccard[:1], jaccard[1:] - jaccard[:-1]])


def _lovasz(errors: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    order = torch.argsort(errors, descending=True)
    return torch.dot(errors[order], _lovasz_grad(truth[order]))


class _PerImage(nn.Module):
    """A loss over a set of positions: that of the whole batch (``whole_batch``), or with ``per_image`` the mean
    over the items of each item's loss (``per_item``: exact on any split)."""

    def __init__(self, per_image: bool = False, ignore: int | None = None):
        super().__init__()
        self.per_image, self.ignore = per_image, ignore
        self.per_item, self.whole_batch = per_image, None if per_image else _RATIO

    def positions_loss(self, outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The loss over all positions of `outputs`."""
        raise NotImplementedError(f"Expected {type(self).__name__} to define positions_loss(outputs, target).")

    def forward(self, outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if not self.per_image:
            return self.positions_loss(outputs, target)
        items = [self.positions_loss(outputs[i:i + 1], target[i:i + 1]) for i in range(len(outputs))]
        return torch.stack(items).mean()


class Lovasz(_PerImage):
    """Lovász-softmax (Berman et al., 2018): the mean over the classes present in the target of the Lovász
    extension of the Jaccard loss at the errors ``|t_c - p_c|``; positions whose target is ``ignore`` are left
    out."""

    def positions_loss(self, outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        proba = torch.softmax(outputs, dim=1).movedim(1, -1).reshape(-1, outputs.shape[1])
        labels = (target.squeeze(1) if target.dim() == outputs.dim() else target).reshape(-1)
        if self.ignore is not None:
            proba, labels = proba[labels != self.ignore], labels[labels != self.ignore]
        losses = [_lovasz(((labels == c).to(proba.dtype) - proba[:, c]).abs(), (labels == c).to(proba.dtype))
                  for c in range(proba.shape[1]) if (labels == c).any()]
        return torch.stack(losses).mean() if losses else proba.sum() * 0


class BinaryLovasz(_PerImage):
    """Lovász hinge (Berman et al., 2018): the Lovász extension of the Jaccard loss at the hinge errors
    ``relu(1 - logit * (2t - 1))``; positions whose target is ``ignore`` are left out."""

    def positions_loss(self, outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits, labels = outputs.reshape(-1), target.reshape(-1).to(outputs.dtype)
        if self.ignore is not None:
            logits, labels = logits[labels != self.ignore], labels[labels != self.ignore]
        if not len(labels):
            return logits.sum() * 0
        return _lovasz(F.relu(1 - logits * (2 * labels - 1)), labels)


class SSIM(NormalizedLoss, nn.Module):
    """``1 - SSIM``: one minus the mean structural similarity (Wang et al., 2004) of the outputs and the target,
    each channel on its own, with a Gaussian window of ``kernel_size`` and ``sigma`` (zero padding keeps the size)
    and constants ``0.01**2``, ``0.03**2`` (values in [0, 1]). A mean over items: exact on any split."""

    per_item = True
    normalizer_name = 'the items'

    def __init__(self, kernel_size: int = 11, sigma: float = 1.5):
        nn.Module.__init__(self)
        self.kernel_size, self.sigma = kernel_size, sigma

    def similarity(self, outputs: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The SSIM map, ``(N, C, H, W)``."""
        coords = torch.arange(self.kernel_size, dtype=outputs.dtype, device=outputs.device) - self.kernel_size // 2
        gauss = torch.exp(-coords ** 2 / (2 * self.sigma ** 2))
        gauss = gauss / gauss.sum()
        channels = outputs.shape[1]
        kernel = torch.outer(gauss, gauss).expand(channels, 1, -1, -1)
        target = target.to(outputs.dtype)

        def blur(image: torch.Tensor) -> torch.Tensor:
            return F.conv2d(image, kernel, padding=self.kernel_size // 2, groups=channels)

        mu_x, mu_y = blur(outputs), blur(target)
        var_x, var_y = blur(outputs * outputs) - mu_x ** 2, blur(target * target) - mu_y ** 2
        cov = blur(outputs * target) - mu_x * mu_y
        c1, c2 = 0.01 ** 2, 0.03 ** 2
        return ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x ** 2 + mu_y ** 2 + c1) * (var_x + var_y + c2))

    def sum(self, outputs: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
        return (1 - self.similarity(outputs, targets[0]).flatten(1).mean(1)).sum()

    def normalizer(self, *targets: torch.Tensor) -> int:
        return len(targets[0])

    def __call__(self, outputs: torch.Tensor, *targets: torch.Tensor) -> torch.Tensor:
        return self.sum(outputs, *targets) / self.normalizer(*targets)


SEGMENTATION_LOSSES = {'dice': Dice, 'bdice': BinaryDice, 'btversky': BinaryTversky, 'lovasz': Lovasz,
                       'blovasz': BinaryLovasz, 'ssim': SSIM}
