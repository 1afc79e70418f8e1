"""Every loss normalized by its own normalizer, counted once on the whole batch (SPEC §3, "Loss normalization"): one
SGD step on replicas, micro-batches and both against the hand-written full-batch step, for every loss of the table
in docs/parallel.md; pieces with nothing to count add 0; the plan says how a loss is weighted."""
import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.models.torch import NormalizedLoss, TorchModel
from flowpipe.parallel import TorchLoss, make_plan
from flowpipe.parallel.losses import TORCH_NORMALIZERS, normalized

from . import loss_cases
from .loss_cases import CASES, MASKED, batch, engine_step, reference_step, relative

# exact under a float32 and a float64 default dtype; KLDivLoss's 'mean' warns that it will change
pytestmark = [pytest.mark.usefixtures('default_dtype'),
              pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss:UserWarning")]

# 12 items, the first 4 padding (nothing to count) where the loss can ignore items: micro-batches of 3 make a whole
# first piece of padding, 'CPU:0x3' with micro-batches of 4 three of them
LAYOUTS = {'2 replicas': (['CPU:0', 'CPU:1'], None), 'microbatch=3': ('cpu', 3),
           'CPU:0x3, microbatch=4': ('CPU:0x3', 4)}


@pytest.mark.parametrize('layout', list(LAYOUTS))
@pytest.mark.parametrize('name', list(CASES))
def test_one_step_equals_the_full_batch_step_for_every_loss(name, layout):
    inputs, targets = batch(name, 12, ignored=range(4))
    expected, expected_loss = reference_step(name, inputs, targets)
    device, microbatch = LAYOUTS[layout]
    params, loss = engine_step(name, inputs, targets, device, microbatch)
    assert math.isfinite(loss)
    assert loss == pytest.approx(expected_loss, rel=1e-10)
    assert relative(params, expected) < 1e-10


@pytest.mark.parametrize('name', MASKED)
def test_a_layout_whose_every_piece_but_one_has_nothing_to_count_takes_the_step(name):
    inputs, targets = batch(name, 9, ignored=range(8))      # only the last item counts
    expected, expected_loss = reference_step(name, inputs, targets)
    params, loss = engine_step(name, inputs, targets, ['CPU:0', 'CPU:1'], 2)
    assert loss == pytest.approx(expected_loss, rel=1e-10)
    assert relative(params, expected) < 1e-10


def test_a_batch_with_nothing_to_count_gives_torchs_nan_loss():
    inputs, targets = batch('ce ignore_index', 6, ignored=range(6))
    _, expected_loss = reference_step('ce ignore_index', inputs, targets)
    _, loss = engine_step('ce ignore_index', inputs, targets, 'cpu', 2)
    assert math.isnan(expected_loss) and math.isnan(loss)


def test_every_torch_loss_flowpipe_names_has_a_normalizer_and_a_case_here():
    from flowpipe.models.torch.losses import LOSS_ALIASES
    assert set(LOSS_ALIASES.values()) <= set(TORCH_NORMALIZERS)
    assert {type(make()) for make, _, _ in CASES.values()} - {loss_cases.MaskedMSE} == set(TORCH_NORMALIZERS)


def test_torch_losses_are_placed_by_their_options_and_unknown_ones_are_not():
    assert normalized(nn.CrossEntropyLoss()).normalizer(torch.tensor([0, -100, 2])) == 2
    weighted = normalized(nn.NLLLoss(weight=loss_cases.class_weights(), ignore_index=9))
    assert float(weighted.normalizer(torch.tensor([1, 9, 3, 3]))) == 8.0      # 2 + 3 + 3, the 9 ignored
    assert normalized(nn.MSELoss(reduction='sum')).normalizer(torch.zeros(3, 2)) == 1
    assert normalized(nn.MSELoss()).normalizer(torch.zeros(3, 2)) == 6
    assert normalized(nn.KLDivLoss(reduction='batchmean')).per_item and normalized(nn.MultiMarginLoss()).per_item
    assert normalized(nn.CrossEntropyLoss(reduction='none')) is None
    assert normalized(F.cross_entropy) is None and normalized(lambda outputs, target: outputs.sum()) is None

    class OwnCrossEntropy(nn.CrossEntropyLoss):      # may compute otherwise: not placed
        pass
    assert normalized(OwnCrossEntropy()) is None
    assert isinstance(normalized(nn.CrossEntropyLoss()), TorchLoss)


def test_a_loss_flowpipe_cannot_place_is_weighted_by_item_shares_as_before():
    """A plain function: each piece's value weighted by its share of the items (exact for a mean over items)."""
    inputs, targets = batch('ce', 12)
    expected, _ = reference_step('ce', inputs, targets)
    params, _ = engine_step('ce', inputs, targets, ['CPU:0', 'CPU:1'], 5, loss=F.cross_entropy)
    assert relative(params, expected) < 1e-10
    summed = lambda outputs, target: F.cross_entropy(outputs, target, reduction='sum')  # noqa: E731
    inputs, targets = batch('ce sum', 12)
    expected, _ = reference_step('ce sum', inputs, targets)
    params, _ = engine_step('ce sum', inputs, targets, ['CPU:0', 'CPU:1'], 5, loss=summed)
    assert relative(params, expected) > 1e-3        # not a mean over items: the plan says so (below)


def test_a_user_loss_declared_by_its_two_methods_without_the_base_class():
    class Masked:
        def sum(self, outputs, target, mask):
            return ((outputs - target) ** 2 * mask).sum()

        def normalizer(self, target, mask):
            return mask.sum()

        def __call__(self, outputs, target, mask):
            return self.sum(outputs, target, mask) / self.normalizer(target, mask)

    name = 'masked mse (own NormalizedLoss)'
    inputs, targets = batch(name, 12, ignored=range(4))
    expected, expected_loss = reference_step(name, inputs, targets)
    params, loss = engine_step(name, inputs, targets, 'CPU:0x3', 4, loss=Masked())
    assert loss == pytest.approx(expected_loss, rel=1e-10) and relative(params, expected) < 1e-10


def test_the_base_class_says_which_method_is_missing():
    with pytest.raises(NotImplementedError, match='normalizer'):
        NormalizedLoss().normalizer(torch.zeros(2))


def _segmentation_model(**config):
    torch.manual_seed(0)
    network = nn.Sequential(nn.Conv2d(2, 6, 3, padding=1), nn.Tanh(), nn.Conv2d(6, 4, 1)).double()
    return TorchModel({'model': network, 'inputs/x/shape': (2, 3, 3), 'inputs/y/classes': 4,
                       'optimizer': {'name': 'SGD', 'lr': 0.1}, **config})


def test_a_model_with_an_ignore_label_trains_and_predicts_the_full_batch_loss_whatever_the_layout():
    name = 'segmentation ignore_index=255'
    inputs, (labels,) = batch(name, 12, ignored=range(4))
    expected, expected_loss = reference_step(name, inputs, [labels])
    for layout in ({'device': 'cpu'}, {'device': 'cpu', 'microbatch': 3}, {'device': 'CPU:0x3', 'microbatch': 4}):
        with _segmentation_model(loss={'name': 'ce', 'ignore_index': 255}, **layout) as model:
            loss = model.train(x=inputs, y=labels, fetches='loss')
            assert model.skipped_steps == 0                 # a piece of padding is no NaN, the step is taken
            assert loss == pytest.approx(expected_loss, rel=1e-10)
            assert relative([p.detach().numpy() for p in model.model.parameters()], expected) < 1e-10
            predicted = model.predict(x=inputs, y=labels, fetches='loss')
            with torch.no_grad():
                outputs = model.model(inputs)
            assert predicted == pytest.approx(float(F.cross_entropy(outputs, labels, ignore_index=255)), rel=1e-10)


def test_the_plan_says_what_a_loss_is_divided_by_or_that_it_is_exact_only_as_a_mean_over_items():
    with _segmentation_model(loss={'name': 'ce', 'ignore_index': 255}, device='CPU:0x2') as model:
        text = model.device_plan(12)
        assert "divided by the whole batch's normalizer (the targets not equal to ignore_index)" in text
        assert 'piece_size' not in text and 'not declared' not in text
    with _segmentation_model(loss=lambda outputs, target: F.cross_entropy(outputs, target), microbatch=2) as model:
        model.train(x=torch.randn(4, 2, 3, 3), y=torch.zeros(4, 3, 3, dtype=torch.long))
        text = model.device_plan(4)
        assert text.count('not declared') == 1 and 'exact only if the loss is a mean over items' in text
        assert 'piece_size / 4' in text
    plain = make_plan(['CPU:0', 'CPU:1'], num_gpus=0).describe(4)
    assert 'not declared' not in plain and 'piece_size / 4' in plain      # no loss given: the rule alone



class _Normalized(NormalizedLoss):
    def __init__(self, value):
        self.value = value

    def sum(self, outputs, target):
        return ((outputs - target) ** 2).sum()

    def normalizer(self, target):
        return self.value if target.shape[0] else 0


@pytest.mark.parametrize('value', [-3.0, 0, math.nan, math.inf, torch.tensor(-1.0)])
@pytest.mark.parametrize('device, microbatch', [('cpu', None), ('cpu', 2), (['CPU:0', 'CPU:1'], None)])
def test_a_normalizer_that_is_not_a_positive_finite_number_is_refused(value, device, microbatch):
    model = TorchModel({'model': nn.Linear(3, 1), 'loss': _Normalized(value), 'optimizer': 'SGD',
                        'device': device, 'microbatch': microbatch})
    with pytest.raises(ValueError, match=r'Expected the normalizer of _Normalized to be a finite number > 0'):
        model.train(torch.ones(5, 3), torch.zeros(5, 1))


def test_an_empty_piece_may_count_zero():     # 5 items in pieces of 2: the normalizer is counted on the batch
    model = TorchModel({'model': nn.Linear(3, 1), 'loss': _Normalized(2.0), 'optimizer': 'SGD',
                        'microbatch': 2})
    model.train(torch.ones(5, 3), torch.zeros(5, 1))
    assert all(torch.isfinite(p).all() for p in model.model.parameters())
