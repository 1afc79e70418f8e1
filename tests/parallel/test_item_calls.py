"""Random calls inside a forward drawn by item (``flowpipe.parallel.item_calls``): ``F.dropout`` and its kinds,
attention dropout in ``scaled_dot_product_attention`` and ``nn.MultiheadAttention`` give one device's model on
replicas and micro-batches (float64 and float32, a sum loss, a batch that does not divide evenly); the random calls
that do not draw by item are said once and named in the plan."""
import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.models.torch import TorchModel
from flowpipe.parallel import build_engine, make_plan

pytestmark = pytest.mark.usefixtures('default_dtype')
LAYOUTS = [(['CPU:0', 'CPU:1'], None), ('cpu', 3), ('CPU:0x3', 4)]


class Calls(nn.Module):
    """Every random call the mode routes: functional dropouts, SDPA with dropout, MultiheadAttention both ways."""

    def __init__(self, which):
        super().__init__()
        self.which = which
        self.inp, self.out = nn.Linear(6, 16), nn.Linear(16, 3)
        self.mha = nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True)
        self.seq_first = nn.MultiheadAttention(8, 2, dropout=0.3)

    def forward(self, x):
        train, which = self.training, self.which
        h = self.inp(x)
        if 'f' in which:
            h = F.dropout(h, 0.3, train) + F.alpha_dropout(h, 0.2, train) + torch.dropout(h, 0.1, train)
        t = h.view(-1, 2, 8)
        if 's' in which:
            q = t.view(-1, 2, 2, 4).transpose(1, 2)
            attended = F.scaled_dot_product_attention(q, q, q, dropout_p=0.2 if train else 0.0, is_causal=True)
            t = t + attended.transpose(1, 2).reshape(t.shape)
        if 'm' in which:
            t = t + self.mha(t, t, t)[0] + self.mha(t, t, t, need_weights=False)[0]
            s = t.transpose(0, 1)
            t = t + self.seq_first(s, s, s)[0].transpose(0, 1)
        if 'd' in which:
            t = F.dropout1d(t, 0.2, train) + F.feature_alpha_dropout(t, 0.1, train)
        return self.out(t.flatten(1))


def sgd_steps(net, devices, microbatch, randomness='by_item', size=10):
    generator = torch.Generator().manual_seed(1)
    dtype = torch.get_default_dtype()
    data = [(torch.randn(size, 6, generator=generator, dtype=dtype), torch.randint(0, 3, (size,), generator=generator))
            for _ in range(3)]
    engine = build_engine(copy.deepcopy(net), make_plan(devices, microbatch=microbatch, randomness=randomness,
                                                        num_gpus=0))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.05)
    for seed, (inputs, targets) in zip((11, 12, 13), data):
        engine.train_step([inputs], [targets], nn.CrossEntropyLoss(reduction='sum'), optimizer, seed=seed)
    parameters = [p.detach().clone() for p in engine.module.parameters()]
    engine.close()
    return parameters


def relative(first, second):
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(first, second))


@pytest.mark.parametrize('which', ['f', 's', 'm', 'd', 'fsmd'])
def test_random_calls_in_a_forward_give_one_device_s_model_on_every_layout(which, default_dtype):
    torch.manual_seed(0)
    net = Calls(which)
    tolerance = 1e-12 if default_dtype == torch.float64 else 1e-4
    with warnings.catch_warnings():
        warnings.simplefilter('error')      # every call here draws by item: nothing to say
        alone = sgd_steps(net, 'cpu', None, size=11)
        for devices, microbatch in LAYOUTS:
            assert relative(sgd_steps(net, devices, microbatch, size=11), alone) < tolerance, (devices, microbatch)
    # 'torch': the layout changes the masks (the calls do draw)
    assert relative(sgd_steps(net, 'cpu', 3, 'torch', size=11), sgd_steps(net, 'cpu', None, 'torch', size=11)) > 1e-3


def test_attention_dropout_draws_other_masks_for_other_seeds_and_none_in_evaluation():
    torch.manual_seed(0)
    net = Calls('sm').double()
    engine = build_engine(net, make_plan('cpu'))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.0)
    inputs = torch.randn(4, 6, dtype=torch.float64)
    targets = torch.zeros(4, dtype=torch.long)
    outputs = [engine.train_step([inputs], [targets], F.cross_entropy, optimizer, seed=seed,
                                 return_outputs=True).outputs for seed in (1, 1, 2)]
    assert torch.equal(outputs[0], outputs[1]) and not torch.allclose(outputs[0], outputs[2])
    net.eval()
    with torch.no_grad():
        assert torch.allclose(engine.predict([inputs]), net(inputs))
    engine.close()


class Noisy(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x) + 0.1 * torch.randn_like(x)


class Uncovered(nn.Module):
    def __init__(self):
        super().__init__()
        self.block, self.act = Noisy(), nn.RReLU()

    def forward(self, x):
        return self.act(self.block(x))


def test_a_random_call_that_does_not_draw_by_item_is_said_once_and_the_plan_stops_claiming_every_layout():
    model = TorchModel({'model': Uncovered(), 'inputs/x/shape': (4,), 'inputs/y/classes': 4, 'loss': 'ce',
                        'optimizer': 'SGD'})
    x, y = np.random.default_rng(0).random((6, 4)).astype('float32'), np.arange(6) % 4
    with pytest.warns(UserWarning) as record:
        model.train(x=x, y=y)
    messages = [str(warning.message) for warning in record if 'by item' in str(warning.message)]
    assert len(messages) == 2
    assert any("torch.randn_like in 'block'" in message for message in messages)
    assert any("F.rrelu in 'act'" in message and "'randomness': 'torch'" in message for message in messages)
    with warnings.catch_warnings():
        warnings.simplefilter('error')      # once per model
        model.train(x=x, y=y)
    plan = model.device_plan()
    assert "but for torch.randn_like in 'block', F.rrelu in 'act': drawn from torch's generator" in plan
    assert 'the same on every layout\n' not in plan + '\n'


def test_a_sequence_first_dropout_call_is_said_and_falls_back_to_torch_s_generator():
    class SequenceFirst(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(4, 4)

        def forward(self, x):
            return F.dropout(self.linear(x).t(), 0.5, self.training).t()
    engine = build_engine(SequenceFirst().double(), make_plan('cpu'))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    inputs = torch.randn(6, 4, dtype=torch.float64)
    with pytest.warns(UserWarning, match=r"F\.dropout in the network.*shape \(4, 6\).*first axis"):
        engine.train_step([inputs], [inputs], F.mse_loss, optimizer, seed=1)
    assert "but for F.dropout in the network" in engine.describe()
    engine.close()


def test_checkpointed_random_calls_replay_their_masks():
    """A checkpointed block's recomputation takes the first forward's draws: the same model as without."""
    torch.manual_seed(0)
    config = {'model': nn.Sequential(nn.Linear(6, 16), Dropped(), nn.Linear(16, 3)), 'inputs/x/shape': (6,),
              'inputs/y/classes': 3, 'loss': 'ce', 'optimizer': {'name': 'SGD', 'lr': 0.1}}
    rng = np.random.default_rng(0)
    x, y = rng.random((8, 6)), rng.integers(0, 3, 8)
    results = []
    for extra in ({}, {'checkpoint_activations': ['1']}):
        model = TorchModel({**copy.deepcopy(config), **extra, 'microbatch': 3})
        torch.manual_seed(5)                # the step seed
        model.train(x=x, y=y)
        results.append([p.detach().clone() for p in model.model.parameters()])
    assert relative(results[1], results[0]) < 1e-6


class Dropped(nn.Module):
    def forward(self, x):
        q = x.view(-1, 2, 2, 4)
        return F.dropout(x, 0.4, self.training) + F.scaled_dot_product_attention(
            q, q, q, dropout_p=0.3 if self.training else 0.0).reshape(x.shape)


@pytest.mark.parametrize('which, watched', [('', False), ('f', True), ('s', True)])
def test_the_mode_stops_watching_after_a_first_step_without_random_calls(which, watched):
    from flowpipe.parallel.item_calls import CallDraws
    torch.manual_seed(0)
    net = Calls(which).double() if which else nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.3), nn.Linear(8, 3)).double()
    engine = build_engine(net, make_plan('cpu'))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    inputs, targets = torch.randn(4, 6, dtype=torch.float64), torch.zeros(4, dtype=torch.long)
    for seed in (1, 2):
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer, seed=seed)
    streams = engine._item_streams
    assert streams.watching is watched
    assert isinstance(streams.piece(0, 0, 4), CallDraws) is watched
    engine.close()
