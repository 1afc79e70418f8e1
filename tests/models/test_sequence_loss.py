"""``'loss': 'ce'`` on a language model's ``(B, T, V)`` logits and ``(B, T)`` targets with padding is the
hand-written per-token mean over the whole batch, on one device, micro-batches and replicas (2 gloo ranks:
``test_sequence_loss_ranks.py``), under float32 and float64; the network may return ``(logits, loss)``, a dict
or an object (``'output'`` names the field), or take its inputs by keyword."""
import numpy as np
import pytest
import torch

from flowpipe.models.torch import TorchModel
from flowpipe.models.torch.outputs import prediction, read_output
from flowpipe.parallel.losses import torch_normalized

from . import sequence_loss_jobs as jobs

pytestmark = pytest.mark.usefixtures('default_dtype')
LAYOUTS = {'one device': {}, 'microbatch=2': {'microbatch': 2}, '2 replicas': {'device': 'CPU:0x2'},
           '2 replicas, microbatch=2': {'device': 'CPU:0x2', 'microbatch': 2}}


def _close(got, want):
    tolerance = 1e-12 if torch.get_default_dtype() == torch.float64 else 1e-6
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize('layout', list(LAYOUTS))
@pytest.mark.parametrize('returns', ['logits', 'tuple', 'dict', 'object', 'classes first'])
def test_the_step_is_the_per_token_mean_over_the_whole_batch(returns, layout):
    want, want_loss = jobs.by_hand()
    got, loss = jobs.step(returns, **LAYOUTS[layout])
    _close(got, want)
    assert loss == pytest.approx(want_loss, rel=1e-6)


@pytest.mark.parametrize('layout', ['one device', '2 replicas, microbatch=2'])
def test_inputs_go_by_keyword_when_the_config_says(layout):
    want, _ = jobs.by_hand()
    got, _ = jobs.step('tuple', keywords=True, **LAYOUTS[layout])
    _close(got, want)


def test_the_loss_flattens_classes_last_and_keeps_torchs_layout():
    loss = torch_normalized(torch.nn.CrossEntropyLoss())
    logits, targets = torch.randn(3, 4, 5), torch.randint(0, 5, (3, 4))
    targets[0, :2] = -100
    want = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets)
    assert torch.allclose(loss(logits, targets), want)
    assert torch.allclose(loss.sum(logits, targets) / loss.normalizer(targets), want)
    assert torch.allclose(loss(logits.transpose(1, 2), targets), want)
    square = torch.randn(3, 4, 4)                 # both layouts fit: torch's (B, C, T) is read
    assert torch.allclose(loss(square, targets.clamp(0, 3)),
                          torch.nn.functional.cross_entropy(square, targets.clamp(0, 3)))


def test_the_prediction_field_and_its_errors():
    assert read_output('logits') == ((), 'logits')
    assert read_output(['proba', 'labels']) == (('proba', 'labels'), None)
    with pytest.raises(ValueError, match="Did you mean 'sigmoid'"):
        read_output('sigmod')
    tensor = torch.zeros(2)
    assert prediction((tensor, 1), None) is tensor and prediction({'logits': tensor}, None) is tensor
    assert prediction({'scores': tensor}, 'scores') is tensor
    with pytest.raises(ValueError, match="'output': 'logits'") as error:
        prediction({'logit': tensor}, None)
    assert "'logit'" in str(error.value)
    model = TorchModel(jobs.config('dict'), output='loss')
    assert model.prediction_field == 'loss'
    with pytest.raises(TypeError, match='keyword_inputs'):
        TorchModel(jobs.config(), keyword_inputs='yes')


def test_predictions_are_the_picked_logits():
    inputs, _ = jobs.batch()
    model = TorchModel(jobs.config('object'))
    predicted = model.predict(input_ids=inputs)
    assert predicted.shape == (jobs.N, jobs.T, jobs.VOCAB)
