"""The recipes of language-model runs: AdamW's parameter groups as nanoGPT's ``configure_optimizers`` makes them
(decay on parameters of 2 or more dimensions), groups chosen by name, and ``'warmup_cosine'``, nanoGPT's ``get_lr``
at every step of a training run."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import B, Dataset, Pipeline, V
from flowpipe.models.torch import TorchModel
from flowpipe.models.torch.decay import WarmupCosine, make_decay
from flowpipe.models.torch.optimizers import make_optimizer


class SmallGPT(nn.Module):
    """Token and position embeddings, a block with LayerNorms, biased linears, and a head tied to the embedding."""

    def __init__(self, vocab=11, block=8, width=6):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.ln_1, self.attn = nn.LayerNorm(width), nn.Linear(width, width)
        self.ln_f, self.lm_head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        self.frozen = nn.Parameter(torch.zeros(3), requires_grad=False)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        x = x + self.attn(self.ln_1(x))
        return self.lm_head(self.ln_f(x))


def nanogpt_groups(model, weight_decay):
    """nanoGPT's configure_optimizers, written out: every trainable parameter with 2+ dimensions decays."""
    param_dict = {name: p for name, p in model.named_parameters() if p.requires_grad}
    decay = [p for p in param_dict.values() if p.dim() >= 2]
    no_decay = [p for p in param_dict.values() if p.dim() < 2]
    return [{'params': decay, 'weight_decay': weight_decay}, {'params': no_decay, 'weight_decay': 0.0}]


def _ids(groups):
    return [([id(p) for p in group['params']], group['weight_decay']) for group in groups]


def test_adamw_groups_are_those_of_nanogpts_configure_optimizers():
    model = SmallGPT()
    spec = {'name': 'AdamW', 'lr': 6e-4, 'betas': (0.9, 0.95), 'weight_decay': 0.1, 'no_decay': 'auto'}
    optimizer = make_optimizer(spec, model.parameters(), model.named_parameters())
    want = torch.optim.AdamW(nanogpt_groups(model, 0.1), lr=6e-4, betas=(0.9, 0.95))
    assert isinstance(optimizer, torch.optim.AdamW)
    assert _ids(optimizer.param_groups) == _ids(want.param_groups)
    assert [group['betas'] for group in optimizer.param_groups] == [(0.9, 0.95)] * 2
    assert sum(len(group['params']) for group in optimizer.param_groups) == 8     # tied once, frozen left out


def test_a_model_config_trains_with_nanogpts_groups():
    model = TorchModel({'model': SmallGPT, 'inputs/idx/shape': (8,), 'inputs/targets/classes': 11,
                        'initial_block/inputs': 'idx',
                        'optimizer': {'name': 'AdamW', 'lr': 1e-2, 'weight_decay': 0.1, 'no_decay': 'auto'}})
    want = nanogpt_groups(model.model, 0.1)
    assert _ids(model.optimizer.param_groups) == _ids(want)
    model.train(idx=np.zeros((2, 8), np.int64), targets=np.ones((2, 8), np.int64))


def test_groups_by_name_with_their_own_options_and_names_kept_from_decay():
    model = SmallGPT()
    spec = {'name': 'SGD', 'lr': 0.1, 'weight_decay': 0.01, 'no_decay': ['ln_*', '*.bias'],
            'groups': [{'params': 'w?e.*', 'lr': 0.5}, {'params': lambda name, p: name.startswith('attn'),
                                                         'momentum': 0.9}]}
    groups = make_optimizer(spec, model.parameters(), model.named_parameters()).param_groups
    named = dict(model.named_parameters())
    want = [([named['wte.weight'], named['wpe.weight']], 0.5, 0.01, 0.0), ([named['attn.weight']], 0.1, 0.01, 0.9),
            ([named['attn.bias']], 0.1, 0.0, 0.9),
            ([named['ln_1.weight'], named['ln_1.bias'], named['ln_f.weight'], named['ln_f.bias']], 0.1, 0.0, 0.0)]
    got = [(group['params'], group['lr'], group['weight_decay'], group['momentum']) for group in groups]
    assert [([id(p) for p in params], *rest) for params, *rest in got] == [
        ([id(p) for p in params], *rest) for params, *rest in want]


def test_bad_groups_name_the_fix():
    model = SmallGPT()
    with pytest.raises(ValueError, match="match none"):
        make_optimizer({'name': 'SGD', 'lr': 1, 'groups': [{'params': 'encoder.*'}]}, model.parameters(),
                       model.named_parameters())
    with pytest.raises(TypeError, match="with 'params'"):
        make_optimizer({'name': 'SGD', 'lr': 1, 'groups': [{'lr': 2}]}, model.parameters(), model.named_parameters())
    with pytest.raises(TypeError, match='glob pattern'):
        make_optimizer({'name': 'SGD', 'lr': 1, 'no_decay': 3}, model.parameters(), model.named_parameters())
    with pytest.raises(ValueError, match='names'):
        make_optimizer({'name': 'SGD', 'lr': 1, 'no_decay': 'auto'}, model.parameters())


def get_lr(it, learning_rate, warmup_iters, lr_decay_iters, min_lr):
    """nanoGPT's learning rate of iteration ``it``, written out."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def test_warmup_cosine_is_nanogpts_get_lr_at_every_step_of_a_run():
    steps, lr, warmup, total, floor = 40, 6e-4, 5, 30, 6e-5
    config = {'model': lambda: nn.Linear(2, 1), 'inputs/x/shape': (2,), 'inputs/y/shape': (1,), 'loss': 'mse',
              'initial_block/inputs': 'x', 'optimizer': {'name': 'AdamW', 'lr': lr},
              'decay': {'name': 'warmup_cosine', 'warmup': warmup, 'total': total, 'min_lr': floor}}
    train = (Pipeline().init_model('net', config=config)
             .train_model('net', x=B.x, y=B.y)) << Dataset(4, preloaded={'x': np.zeros((4, 2)), 'y': np.zeros((4, 1))})
    train.run(2, n_iters=steps)
    taken = [rates[0] for rates in train.m('net').history.lrs]       # the rate each step was taken with
    assert taken == [get_lr(it, lr, warmup, total, floor) for it in range(steps)]


def test_warmup_cosine_scales_the_floor_of_groups_with_their_own_rate():
    params = [nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))]
    optimizer = torch.optim.SGD([{'params': params[:1]}, {'params': params[1:], 'lr': 0.2}], lr=0.1)
    decay = make_decay({'name': 'warmup_cosine', 'warmup': 2, 'total': 6, 'min_lr': 0.01}, optimizer)
    assert isinstance(decay.scheduler, WarmupCosine)
    for step in range(1, 9):
        optimizer.step()
        decay.after_batch(step)
    assert [group['lr'] for group in optimizer.param_groups] == [0.01, pytest.approx(0.02)]


@pytest.mark.parametrize('options, match', [({'warmup': 5, 'total': 5}, "'total' above"),
                                            ({'warmup': -1, 'total': 5}, "'warmup'"),
                                            ({'warmup': 1, 'total': 5, 'min_lr': -1}, 'min_lr')])
def test_bad_warmup_cosine_options_name_the_fix(options, match):
    optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match=match):
        make_decay({'name': 'warmup_cosine', **options}, optimizer)
