"""Functions the distributed randomness tests run in every rank (``flowpipe.parallel.launch``) and in one process.

Each trains a float64 network with dropout in a seeded run (``dist_jobs.train``, ``sharded_jobs.train``) and returns
its parameters and losses, so a launched job's ranks compare with one process on the whole batch.
"""
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.models.torch.networks import MLPNetwork

from . import dist_jobs, sharded_jobs
from .dist_jobs import N_CLASSES, N_FEATURES


def dropout_network():
    """Dropout on items and on feature maps, in float64."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(N_FEATURES, 16), nn.Tanh(), nn.Dropout(0.5), nn.Unflatten(1, (4, 4)),
                         nn.Dropout1d(0.3), nn.Flatten(), nn.Linear(16, N_CLASSES)).double()


def dropout_mlp():
    """The sharded tests' MLP (initial_block, body, head) with dropout after each hidden layer."""
    torch.manual_seed(0)
    return MLPNetwork((N_FEATURES,), N_CLASSES, units=(6, 4), dropout=0.4).double()


class AttentionNet(nn.Module):
    """Random calls in a forward: ``F.dropout``, attention dropout in ``scaled_dot_product_attention`` and in
    ``nn.MultiheadAttention`` (``flowpipe.parallel.item_calls``)."""

    def __init__(self):
        super().__init__()
        self.inp, self.out = nn.Linear(N_FEATURES, 16), nn.Linear(16, N_CLASSES)
        self.attention = nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True)

    def forward(self, x):
        tokens = F.dropout(self.inp(x), 0.3, self.training).view(-1, 2, 8)
        heads = tokens.view(-1, 2, 2, 4).transpose(1, 2)
        attended = F.scaled_dot_product_attention(heads, heads, heads, dropout_p=0.2 if self.training else 0.0,
                                                  is_causal=True).transpose(1, 2).reshape(tokens.shape)
        tokens = tokens + attended + self.attention(tokens, tokens, tokens)[0]
        return self.out(tokens.flatten(1))


def attention_network():
    torch.manual_seed(0)
    return AttentionNet().double()


def scenarios():
    """Replicated ranks with micro-batches under 'by_item' and 'torch'; ranks sharding the model under 'by_item'
    (in one process a sharding changes nothing: the one device holds the whole model)."""
    runs = {'by_item': dist_jobs.train(7, microbatch=2, overrides={'model': dropout_network}),
            'calls': dist_jobs.train(7, microbatch=2, overrides={'model': attention_network}),
            'torch': dist_jobs.train(7, microbatch=2, overrides={'model': dropout_network, 'randomness': 'torch'}),
            'sharded': sharded_jobs.train(7, sharding='full', microbatch=3, overrides={'model': dropout_mlp})}
    return {name: {'params': run['params'], 'loss': run['loss']} for name, run in runs.items()}
