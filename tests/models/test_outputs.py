"""batchflow's output operations ('sigmoid', 'softplus', ...) as fetches and its 'output' config key."""
import numpy as np
import pytest
import torch

from flowpipe.models.torch import FETCHES, MLP, TorchModel
from flowpipe.models.torch.inputs import OUTPUTS

pytestmark = pytest.mark.usefixtures('default_dtype')

CONFIG = {'inputs/images/shape': (6,), 'inputs/labels/classes': 4, 'initial_block/inputs': 'images'}


def _inputs():
    return np.random.default_rng(0).normal(size=(5, 6)).astype('float32')


@pytest.mark.parametrize('output', ['sigmoid', ['sigmoid', 'softplus'], ('proba', 'labels'), None])
def test_output_key_is_read_and_its_names_are_fetched(output):
    model = MLP({**CONFIG, 'output': output})
    images = _inputs()
    logits = torch.as_tensor(model.predict(images))
    names = [output] if isinstance(output, str) else list(output or [])
    assert model.output_names == tuple(names)
    fetched = model.predict(images, fetches=['sigmoid', 'softplus', 'softmax', 'labels', 'sigmoid_uint8'])
    torch.testing.assert_close(torch.as_tensor(fetched[0]), torch.sigmoid(logits))
    torch.testing.assert_close(torch.as_tensor(fetched[1]), torch.log1p(torch.exp(logits)))
    torch.testing.assert_close(torch.as_tensor(fetched[2]), torch.softmax(logits, dim=1))
    assert (fetched[3] == logits.argmax(dim=1).numpy()).all()
    assert fetched[4].dtype == np.uint8 and (fetched[4] == (torch.sigmoid(logits) * 255).to(torch.uint8).numpy()).all()


def test_output_operations_in_train_and_outputs_alias():
    model = MLP(CONFIG)
    loss, sigmoid = model.train(_inputs(), np.arange(5) % 4, outputs=['loss', 'sigmoid'])
    assert isinstance(loss, float) and sigmoid.shape == (5, 4) and ((sigmoid > 0) & (sigmoid < 1)).all()
    assert set(OUTPUTS) <= set(FETCHES)


def test_saved_model_predicts_the_same_sigmoid(tmp_path):
    model = MLP({**CONFIG, 'output': 'sigmoid'})
    images = _inputs()
    before = model.predict(images, outputs='sigmoid')
    model.save(tmp_path / 'model.pt')
    loaded = TorchModel.from_file(tmp_path / 'model.pt')
    assert loaded.output_names == ('sigmoid',)
    np.testing.assert_array_equal(loaded.predict(images, outputs='sigmoid'), before)


@pytest.mark.parametrize('output, error, match', [
    ('sigmod', ValueError, "Did you mean 'sigmoid'"),
    (['proba', 'logits'], ValueError, "'logits'"),
    (3, TypeError, 'output=3'),
])
def test_bad_output_names_the_fix(output, error, match):
    with pytest.raises(error, match=match):
        MLP({**CONFIG, 'output': output})
