"""A module with a planted layout difference that only the gradients show, importable by name so that a run
checkpoint holding it is read (with ``trusted=True``) in the processes of ``verify``."""
import torch
from torch import nn


class PieceGrad(torch.autograd.Function):
    """The identity, whose backward scales the gradient by the piece's share of a batch of 10."""

    @staticmethod
    def forward(ctx, x):
        ctx.rows = x.shape[0]
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * (ctx.rows / 10)


class Planted(nn.Module):
    """``PieceGrad`` as a module: the same activations on every layout, gradients that depend on the piece."""

    def forward(self, x):
        return PieceGrad.apply(x)
