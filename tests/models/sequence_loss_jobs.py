"""A tiny language model's one SGD step on a padded batch of token sequences, in one process or on every rank
(``flowpipe.parallel.launch``), and the same step written by hand: cross entropy summed over the valid tokens of
the whole batch, divided by their number. The network returns its logits ``(B, T, V)``, as language models do,
or inside a ``(logits, loss)`` tuple, a dict or an object, or takes its inputs by keyword."""
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, Dataset, Pipeline, V

VOCAB, T, N, LR = 7, 6, 5, 0.5


def batch():
    """5 sequences, padded unevenly (item 0 all padding, item 3 none): per-piece means would weigh them wrong."""
    rng = np.random.default_rng(3)
    inputs = rng.integers(0, VOCAB, size=(N, T))
    targets = rng.integers(0, VOCAB, size=(N, T))
    for item, valid in enumerate([0, 2, 5, 6, 1]):
        targets[item, valid:] = -100
    return inputs, targets


class Output:
    """A ``ModelOutput``-like object."""

    def __init__(self, logits, loss):
        self.logits, self.loss = logits, loss


class TinyLM(nn.Module):
    """Embedding, tanh, a linear head: logits ``(B, T, V)``; ``returns`` says what forward gives back."""

    def __init__(self, returns='logits'):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.head, self.returns = nn.Embedding(VOCAB, 5), nn.Linear(5, VOCAB), returns

    def forward(self, input_ids, attention_mask=None):
        logits = self.head(torch.tanh(self.embed(input_ids)))
        if attention_mask is not None:
            logits = logits * attention_mask[..., None]
        own = logits.sum() * 0          # a loss of its own, which the step leaves aside
        if self.returns == 'tuple':
            return logits, own
        if self.returns == 'dict':
            return {'loss': own, 'logits': logits}
        if self.returns == 'object':
            return Output(logits, own)
        if self.returns == 'classes first':
            return logits.transpose(1, 2)
        return logits


def config(returns='logits', device='cpu', microbatch=None, keywords=False):
    inputs = {'input_ids': {'shape': (T,)}, 'targets': {'classes': VOCAB}}
    if keywords:
        inputs = {'input_ids': {'shape': (T,)}, 'attention_mask': {'shape': (T,)}, 'targets': {'classes': VOCAB}}
    return {'model': lambda: TinyLM(returns), 'inputs': inputs, 'loss': 'ce', 'keyword_inputs': keywords,
            'initial_block/inputs': ['input_ids', 'attention_mask'] if keywords else 'input_ids',
            'optimizer': {'name': 'SGD', 'lr': LR}, 'device': device, 'microbatch': microbatch}


def step(returns='logits', device='cpu', microbatch=None, keywords=False):
    """One training step of the pipeline on the batch: the parameters after it and the fetched loss."""
    inputs, targets = batch()
    data = {'inputs': inputs, 'targets': targets, 'mask': np.ones((N, T), dtype=np.int64)}
    named = {'input_ids': B.inputs, 'targets': B.targets}
    if keywords:
        named['attention_mask'] = B.mask
    done = (Pipeline().init_variable('loss', [])
            .init_model('lm', config=config(returns, device, microbatch, keywords))
            .train_model('lm', **named, fetches='loss', save_to=V('loss', mode='a'))) << Dataset(N, preloaded=data)
    done.run(N, n_iters=1)
    return [p.detach().numpy().copy() for p in done.m('lm').model.parameters()], done.v('loss')[0]


def by_hand():
    """The step written out: the per-token cross entropy summed over the batch, over the number of valid tokens."""
    inputs, targets = (torch.as_tensor(array) for array in batch())
    network = TinyLM()
    logits = network(inputs)
    valid = targets != -100
    picked = -F.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    loss = (picked * valid).sum() / valid.sum()
    loss.backward()
    with torch.no_grad():
        params = [(p - LR * p.grad).numpy().copy() for p in network.parameters()]
    return params, float(loss.detach())


def rank_steps():
    """On every rank: the step of each kind of return."""
    return {returns: step(returns) for returns in ('logits', 'tuple', 'dict')}
