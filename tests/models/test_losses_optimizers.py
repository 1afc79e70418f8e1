"""The loss, optimizer and decay keys of a model config."""
import pytest
import torch
from torch import nn

from flowpipe.models.torch.losses import make_loss
from flowpipe.models.torch.decay import make_decay
from flowpipe.models.torch.optimizers import make_optimizer


@pytest.mark.parametrize('name, cls', [('ce', nn.CrossEntropyLoss), ('CrossEntropy', nn.CrossEntropyLoss),
                                       ('mse', nn.MSELoss), ('bce', nn.BCEWithLogitsLoss),
                                       ('CrossEntropyLoss', nn.CrossEntropyLoss), ('kldiv', nn.KLDivLoss)])
def test_loss_names(name, cls):
    loss = make_loss(name)
    assert isinstance(getattr(loss, 'loss', loss), cls)


def test_loss_dict_class_instance_and_callable():
    assert make_loss({'name': 'ce', 'label_smoothing': 0.2}).loss.label_smoothing == 0.2
    assert isinstance(make_loss(nn.NLLLoss).loss, nn.NLLLoss)
    instance = nn.CrossEntropyLoss()
    assert make_loss(instance).loss is instance         # in the normalized form, calling the module itself
    func = lambda outputs, target: outputs.sum()  # noqa: E731
    assert make_loss(func) is func
    unplaced = nn.CrossEntropyLoss(reduction='none')    # not a loss flowpipe can place: as given
    assert make_loss(unplaced) is unplaced


def test_default_loss_is_cross_entropy_only_with_classes():
    assert isinstance(make_loss(None).loss, nn.CrossEntropyLoss)
    with pytest.raises(ValueError, match="'loss'"):
        make_loss(None, has_classes=False)


def test_value_losses_accept_integer_targets():
    loss = make_loss('mse')
    assert float(loss(torch.zeros(2, dtype=torch.float64), torch.tensor([1, 1]))) == 1.0


def test_unknown_loss_suggests_close_names():
    with pytest.raises(ValueError, match=r"crossentropy"):
        make_loss('crossentropi')
    with pytest.raises(TypeError, match='loss'):
        make_loss(42)


def _params():
    return [nn.Parameter(torch.ones(2))]


def test_optimizer_forms():
    assert isinstance(make_optimizer(None, _params()), torch.optim.Adam)
    sgd = make_optimizer({'name': 'sgd', 'lr': 0.5, 'momentum': 0.9}, _params())
    assert isinstance(sgd, torch.optim.SGD) and sgd.param_groups[0]['momentum'] == 0.9
    assert isinstance(make_optimizer(torch.optim.AdamW, _params()), torch.optim.AdamW)
    assert isinstance(make_optimizer(lambda params: torch.optim.SGD(params, lr=1), _params()), torch.optim.SGD)


def test_unknown_optimizer_suggests_close_names():
    with pytest.raises(ValueError, match="Adam"):
        make_optimizer('Adma', _params())
    with pytest.raises(ValueError, match="'name'"):
        make_optimizer({'lr': 0.1}, _params())


def test_decay_steps_every_frequency_batches():
    optimizer = make_optimizer({'name': 'SGD', 'lr': 1.0}, _params())
    decay = make_decay({'name': 'exp', 'gamma': 0.5, 'frequency': 2}, optimizer)
    for iteration in range(1, 5):
        optimizer.step()
        decay.after_batch(iteration)
    assert optimizer.param_groups[0]['lr'] == 0.25
    assert make_decay(None, optimizer) is None


def test_bad_decay():
    optimizer = make_optimizer('SGD', _params())
    with pytest.raises(ValueError, match="Did you mean"):
        make_decay('expo_lr', optimizer)
    with pytest.raises(ValueError, match='frequency'):
        make_decay({'name': 'exp', 'gamma': 0.5, 'frequency': 0}, optimizer)


@pytest.mark.parametrize('name', ['adam_w', 'Adam-W', 'AdamW2'])
def test_suggestions_ignore_case_and_separators_and_name_adamw_first(name):
    with pytest.raises(ValueError, match=r"Did you mean \['AdamW'"):
        make_optimizer(name, _params())


def test_a_scheduler_without_its_required_arguments_names_them():
    optimizer = make_optimizer('SGD', _params())
    with pytest.raises(TypeError, match=r"decay 'step' \(StepLR\).*Add \['step_size'\].*"
                                        r"decay=\{'name': 'step', 'step_size': '\.\.\.'\}"):
        make_decay('step', optimizer)
    with pytest.raises(TypeError, match=r"Unknown: \['gama'\]; StepLR accepts \['step_size', 'gamma'"):
        make_decay({'name': 'step', 'step_size': 2, 'gama': 0.5}, optimizer)
    with pytest.raises(TypeError, match=r"optimizer 'SGD' \(SGD\).*Unknown: \['momentun'\]"):
        make_optimizer({'name': 'SGD', 'momentun': 0.9}, _params())
    assert make_decay({'name': 'step', 'step_size': 2}, optimizer) is not None
