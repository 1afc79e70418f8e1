"""Randomness by item (``'randomness': 'by_item'``): dropout masks keyed by (step seed, module, call, global item),
so one device, replicas, micro-batches and their mixes train the same model; the masks' statistics; evaluation mode,
``inplace``, gradients; ``'torch'`` as before; bad values refused."""
import copy
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, Dataset, Pipeline
from flowpipe.models.torch import TorchModel
from flowpipe.parallel import build_engine, make_plan
from flowpipe.parallel.item_random import Kind, call_stream, item_dropout, keep_mask, mix

pytestmark = pytest.mark.usefixtures('default_dtype')
CPU = torch.device('cpu')
LAYOUTS = [('cpu', None), (['CPU:0', 'CPU:1'], None), ('cpu', 3), ('CPU:0x3', 4), (['CPU:0', 'CPU:1'], 2)]


class Twice(nn.Module):
    """Uses one dropout module twice in its forward: each call draws its own mask."""

    def __init__(self, width):
        super().__init__()
        self.linear, self.drop = nn.Linear(width, width), nn.Dropout(0.3)

    def forward(self, x):
        return self.drop(self.linear(self.drop(x)))


def every_dropout_net():
    """Every dropout module kind flowpipe draws by item, inplace ones and a module called twice, in float64."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(6, 48), nn.Dropout(0.5, inplace=True), nn.ReLU(), Twice(48),
        nn.Unflatten(1, (4, 12)), nn.Dropout1d(0.25), nn.Unflatten(2, (3, 4)), nn.Dropout2d(0.3),
        nn.Unflatten(3, (2, 2)), nn.Dropout3d(0.2), nn.Flatten(), nn.SELU(), nn.AlphaDropout(0.2),
        nn.Unflatten(1, (8, 6)), nn.FeatureAlphaDropout(0.1), nn.Flatten(), nn.Linear(48, 3)).double()


def batches(count=3, size=10):
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(size, 6, generator=generator, dtype=torch.float64),
             torch.randint(0, 3, (size,), generator=generator)) for _ in range(count)]


def adam_steps(devices, microbatch, randomness='by_item', net=None, seeds=(11, 12, 13)):
    """Three Adam steps; the parameters after them."""
    engine = build_engine(copy.deepcopy(net or every_dropout_net()),
                          make_plan(devices, microbatch=microbatch, randomness=randomness, num_gpus=0))
    optimizer = torch.optim.Adam(engine.parameters(), lr=0.01)
    for seed, (inputs, targets) in zip(seeds, batches()):
        engine.train_step([inputs], [targets], F.cross_entropy, optimizer, seed=seed)
    parameters = [p.detach().clone() for p in engine.module.parameters()]
    engine.close()
    return parameters


def relative(first, second):
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(first, second))


@pytest.fixture(scope='module')
def one_device(default_dtype):
    return adam_steps('cpu', None)


@pytest.mark.parametrize('devices, microbatch', LAYOUTS[1:])
def test_three_adam_steps_with_dropout_give_one_device_s_parameters_on_every_layout(one_device, devices,
                                                                                    microbatch):
    assert relative(adam_steps(devices, microbatch), one_device) < 1e-10


def test_under_torch_s_generators_the_layout_changes_the_masks_and_the_model(one_device):
    """What 'by_item' fixes: with 'torch' each piece draws its own stream, so the layouts train different models."""
    alone = adam_steps('cpu', None, 'torch')
    assert relative(adam_steps(['CPU:0', 'CPU:1'], None, 'torch'), alone) > 1e-3
    assert relative(adam_steps('cpu', 3, 'torch'), alone) > 1e-3
    assert relative(alone, one_device) > 1e-3       # and 'torch' is not 'by_item'


def test_other_step_seeds_draw_other_masks(one_device):
    assert relative(adam_steps('cpu', None, seeds=(21, 22, 23)), one_device) > 1e-3


def test_the_masks_are_the_hash_s_and_the_user_s_modules_are_left_as_they_were():
    """A one-item view of the bits: the kept elements of ``Dropout`` in the step are those of ``keep_mask`` for
    (seed, module name, call 0, items 0..n-1), and after the step no module keeps the forward it had in it."""
    net = nn.Sequential(nn.Dropout(0.4)).double()
    net.register_parameter('scale', nn.Parameter(torch.ones((), dtype=torch.float64)))
    engine = build_engine(net, make_plan(['CPU:0', 'CPU:1'], microbatch=3, num_gpus=0))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.0)
    inputs = torch.ones(8, 5, dtype=torch.float64)
    result = engine.train_step([inputs], [inputs], lambda out, target: (out * 0).sum() * net.scale, optimizer,
                               seed=9, return_outputs=True)
    from flowpipe.parallel.item_random import _name_key
    expected = keep_mask(call_stream(9, _name_key('0'), 0), 0, 8, 5, 0.4, CPU).double() / 0.6
    assert torch.equal(result.outputs, expected)
    assert all('forward' not in vars(module) for replica in engine.replicas for module in replica.modules())
    with pytest.raises(ZeroDivisionError):          # a step that fails gives them back too
        engine.train_step([inputs], [inputs], lambda out, target: 1 / 0, optimizer, seed=9)
    assert all('forward' not in vars(module) for replica in engine.replicas for module in replica.modules())
    engine.close()


def test_the_tensor_hash_is_splitmix64_bit_for_bit():
    """The bits are a pure function of the keys (so the same on every device): each element is kept when the top
    53 bits of ``mix(mix(stream + (item + 1) G) + (element + 1) E)`` reach ``p * 2**53``."""
    golden, step = 0x9E3779B97F4A7C15, 0xD1B54A32D192ED03
    stream, p = call_stream(5, 77, 2), 0.35
    mask = keep_mask(stream, 1000, 6, 7, p, CPU)
    expected = [[(mix(mix(stream + (item + 1) * golden) + (element + 1) * step) >> 11) >= round(p * 2 ** 53)
                 for element in range(7)] for item in range(1000, 1006)]
    assert mask.tolist() == expected


def test_an_item_s_mask_does_not_depend_on_where_its_piece_starts_or_ends():
    whole = keep_mask(123, 0, 40, 9, 0.5, CPU)
    for start, stop in [(0, 1), (3, 17), (17, 40), (39, 40)]:
        assert torch.equal(keep_mask(123, start, stop - start, 9, 0.5, CPU), whole[start:stop])


@pytest.mark.parametrize('p', [0.1, 0.5, 0.9])
def test_masks_keep_one_minus_p_of_the_elements_independently(p):
    """Over 4000 items x 256 elements the keep rate is 1 - p (within 5 standard errors); masks of neighbouring
    items, of the next step, module and call are uncorrelated (|r| < 0.01 over a million pairs)."""
    mask = keep_mask(call_stream(1, 2, 0), 0, 4000, 256, p, CPU).double()
    error = (p * (1 - p) / mask.numel()) ** 0.5
    assert abs(float(mask.mean()) - (1 - p)) < 5 * error
    assert abs(float(mask[:, 0].mean()) - (1 - p)) < 5 * (p * (1 - p) / 4000) ** 0.5    # per element, over items
    others = {'next item': mask[1:].flatten(), 'next element': mask[:, 1:].flatten(),
              'next step': keep_mask(call_stream(2, 2, 0), 0, 4000, 256, p, CPU).double().flatten(),
              'next module': keep_mask(call_stream(1, 3, 0), 0, 4000, 256, p, CPU).double().flatten(),
              'next call': keep_mask(call_stream(1, 2, 1), 0, 4000, 256, p, CPU).double().flatten()}
    for name, other in others.items():
        base = mask[:-1].flatten() if name == 'next item' else mask[:, :-1].flatten() if name == 'next element' \
            else mask.flatten()
        r = float(torch.corrcoef(torch.stack([base, other]))[0, 1])
        assert abs(r) < 0.01, (name, r)


def test_dropout_scales_kept_elements_by_one_over_one_minus_p_and_its_gradient_is_the_mask():
    inputs = torch.randn(30, 4, 5, dtype=torch.float64, requires_grad=True)
    out = item_dropout(inputs, 0.3, False, Kind(False, False), 42, 7)
    kept = keep_mask(42, 7, 30, 20, 0.3, CPU).reshape(30, 4, 5)
    assert torch.equal(out, torch.where(kept, inputs * (1 / 0.7), torch.zeros((), dtype=torch.float64)))
    weights = torch.randn(30, 4, 5, dtype=torch.float64)
    (grad,) = torch.autograd.grad((out * weights).sum(), inputs)
    assert torch.equal(grad, weights * torch.where(kept, torch.tensor(1 / 0.7, dtype=torch.float64), 0.0))
    for kind in (Kind(False, False), Kind(True, False), Kind(False, True), Kind(True, True)):
        assert torch.autograd.gradcheck(lambda x, kind=kind: item_dropout(x, 0.4, False, kind, 3, 0), (inputs,))


def test_feature_dropout_drops_whole_channels_and_alpha_dropout_keeps_the_mean_and_variance():
    maps = torch.ones(200, 16, 3, 3, dtype=torch.float64)
    out = item_dropout(maps, 0.5, False, Kind(True, False), 8, 0)
    per_channel = out.flatten(2)
    assert torch.all(per_channel.amin(2) == per_channel.amax(2))        # a channel is kept or dropped whole
    assert set(per_channel.unique().tolist()) == {0.0, 2.0}
    normal = torch.randn(2000, 500, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    selu = item_dropout(normal, 0.2, False, Kind(False, True), 9, 0)
    assert abs(float(selu.mean())) < 0.01 and abs(float(selu.std()) - 1) < 0.01


def test_inplace_dropout_changes_its_input_and_gives_what_the_out_of_place_one_gives():
    inputs = torch.randn(12, 7, dtype=torch.float64)
    for kind in (Kind(False, False), Kind(True, True)):
        out = item_dropout(inputs, 0.3, False, kind, 5, 2)
        copy_ = inputs.clone()
        assert item_dropout(copy_, 0.3, True, kind, 5, 2) is copy_ and torch.equal(copy_, out)
    assert torch.equal(item_dropout(inputs, 1.0, False, Kind(False, False), 5, 0), torch.zeros_like(inputs))


def test_a_module_in_evaluation_mode_or_with_p_0_is_the_identity_in_a_training_step():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 5), nn.Dropout(0.5), nn.Dropout(0.0)).double()
    net[1].eval()                           # frozen by its user inside a training module
    engine = build_engine(net, make_plan('cpu', microbatch=2))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.0)
    inputs = torch.randn(5, 5, dtype=torch.float64)
    result = engine.train_step([inputs], [inputs], F.mse_loss, optimizer, seed=1, return_outputs=True)
    assert torch.allclose(result.outputs, net[0](inputs).detach(), rtol=1e-12, atol=1e-12)
    net.train()
    result = engine.train_step([inputs], [inputs], F.mse_loss, optimizer, seed=1, return_outputs=True)
    assert not torch.allclose(result.outputs, net[0](inputs).detach(), rtol=0.1, atol=0.1)
    with torch.no_grad():       # prediction: evaluation mode
        assert torch.allclose(engine.predict([inputs]), net[0](inputs), rtol=1e-12, atol=1e-12)


def test_an_input_that_is_not_batch_first_draws_from_torch_s_generator_with_one_warning():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Unflatten(1, (2, 2)), Transposed(), nn.Dropout(0.5), Transposed(),
                        nn.Flatten(1))
    engine = build_engine(net.double(), make_plan('cpu'))
    optimizer = torch.optim.SGD(engine.parameters(), lr=0.1)
    inputs = torch.randn(6, 4, dtype=torch.float64)
    with pytest.warns(UserWarning, match=r"dropout module '3'.*shape \(2, 6, 2\).*'randomness': 'torch'"):
        engine.train_step([inputs], [inputs], F.mse_loss, optimizer, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter('error')      # once per module
        engine.train_step([inputs], [inputs], F.mse_loss, optimizer, seed=2)


class Transposed(nn.Module):
    def forward(self, x):
        return x.transpose(0, 1)


def test_a_subclass_with_its_own_forward_keeps_it():
    class AlwaysOn(nn.Dropout):
        def forward(self, x):
            return F.dropout(x, self.p, training=True)

    net = nn.Sequential(nn.Linear(3, 3), AlwaysOn(0.5)).double()
    from flowpipe.parallel.item_random import dropout_modules
    assert dropout_modules(net) == []
    assert [name for name, _, _ in dropout_modules(every_dropout_net())] == ['1', '3.drop', '5', '7', '9', '12', '14']


def test_the_steps_after_a_resume_on_another_layout_draw_the_uninterrupted_run_s_masks(one_device):
    """The masks are a pure function of the keys: 1 step on one device, then the state moved to 2 replicas with
    micro-batches for the next 2 steps, gives the 3 steps of one device."""
    first = build_engine(every_dropout_net(), make_plan('cpu'))
    optimizer = torch.optim.Adam(first.parameters(), lr=0.01)
    data = batches()
    first.train_step([data[0][0]], [data[0][1]], F.cross_entropy, optimizer, seed=11)
    second = build_engine(every_dropout_net(), make_plan(['CPU:0', 'CPU:1'], microbatch=3, num_gpus=0))
    resumed = torch.optim.Adam(second.parameters(), lr=0.01)
    second.load_state_dict(first.state_dict())
    second.sync()
    resumed.load_state_dict(optimizer.state_dict())
    for seed, (inputs, targets) in zip((12, 13), data[1:]):
        second.train_step([inputs], [targets], F.cross_entropy, resumed, seed=seed)
    assert relative([p.detach() for p in second.module.parameters()], one_device) < 1e-10
    second.close()


def _pipeline_params(config, seed=8):
    rng = np.random.default_rng(0)
    dataset = Dataset(30, preloaded={'x': rng.normal(size=(30, 6)), 'y': rng.integers(0, 3, 30)})
    base = {'model': every_dropout_net, 'inputs/x/shape': (6,), 'inputs/y/classes': 3, 'loss': 'ce',
            'optimizer': {'name': 'Adam', 'lr': 0.01}}
    pipeline = (Pipeline().init_model('net', config={**base, **config}).train_model('net', x=B.x, y=B.y)) << dataset
    pipeline.run(10, n_epochs=1, shuffle=True, seed=seed)
    model = pipeline.m('net')
    parameters = [p.detach().clone() for p in model.model.parameters()]
    model.close()
    return parameters


def test_a_seeded_pipeline_with_dropout_trains_the_same_model_on_every_layout_by_default():
    alone = _pipeline_params({'device': 'cpu'})
    assert relative(_pipeline_params({'device': 'CPU:0x3', 'microbatch': 4}), alone) < 1e-10
    assert relative(_pipeline_params({'device': 'cpu', 'randomness': 'torch', 'microbatch': 4}), alone) > 1e-3


@pytest.mark.parametrize('value, error, match', [
    ('per_item', ValueError, r"Expected randomness as 'by_item'.*or 'torch'.*Received: randomness='per_item'"),
    (True, TypeError, r"Expected randomness as one of \['by_item', 'torch'\]. Received: True"),
])
def test_bad_values_of_randomness_are_refused_with_the_fix(value, error, match):
    with pytest.raises(error, match=match):
        make_plan('cpu', randomness=value)
    with pytest.raises(error, match=match):
        TorchModel({'model': nn.Linear(2, 2), 'inputs/x/shape': (2,), 'randomness': value})


def test_the_plan_says_how_masks_are_drawn_and_a_compiled_model_keeps_torch_s():
    assert make_plan('cpu').randomness == 'by_item' and make_plan('cpu', randomness='Torch').randomness == 'torch'
    model = TorchModel({'model': nn.Linear(2, 2), 'inputs/x/shape': (2,), 'loss': 'mse'})
    assert "randomness 'by_item': dropout masks drawn per item" in model.device_plan()
    torch_model = TorchModel({'model': nn.Linear(2, 2), 'loss': 'mse', 'randomness': 'torch'})
    assert "randomness 'torch': dropout masks from torch's generators" in repr(torch_model)
    assert make_plan('cpu', compile=True).randomness == 'torch'
    assert "randomness 'torch' (compiled" in make_plan('cpu', compile=True).describe()
    with pytest.raises(ValueError, match=r"Expected randomness='torch' with compile.*Drop compile"):
        make_plan('cpu', compile=True, randomness='by_item')
