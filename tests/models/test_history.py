"""batchflow's loss and learning-rate histories of a model and their plots (plot_loss, plot_lr)."""
import numpy as np
import pytest

from flowpipe.models.torch import MLP

pytestmark = pytest.mark.usefixtures('default_dtype')

CONFIG = {'inputs/images/shape': (6,), 'inputs/labels/classes': 3, 'initial_block/inputs': 'images',
          'optimizer': {'name': 'SGD', 'lr': 0.1}}


def _trained(steps, **config):
    model = MLP({**CONFIG, **config})
    rng = np.random.default_rng(0)
    losses = [model.train(rng.normal(size=(8, 6)).astype('float32'), rng.integers(0, 3, 8), fetches='loss')
              for _ in range(steps)]
    return model, losses


def test_loss_list_and_lr_list_record_every_step():
    model, losses = _trained(4, decay={'name': 'exp', 'gamma': 0.5, 'frequency': 1})
    assert model.loss_list == losses
    assert model.lr_list == [[0.1], [0.05], [0.025], [0.0125]]


def test_plot_loss_and_plot_lr_draw_the_histories_and_save(tmp_path):
    pytest.importorskip('matplotlib')
    import matplotlib
    matplotlib.use('Agg')
    model, losses = _trained(5)
    ax = model.plot_loss(window=2, path=tmp_path / 'loss.png')
    np.testing.assert_allclose(ax.lines[0].get_ydata(), losses)
    np.testing.assert_allclose(ax.lines[1].get_ydata(), np.convolve(losses, [0.5, 0.5], mode='valid'))
    assert (tmp_path / 'loss.png').stat().st_size > 0
    ax = model.plot_lr(path=tmp_path / 'lr.pdf')
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [0.1] * 5)
    assert (tmp_path / 'lr.pdf').stat().st_size > 0 and ax.get_xlabel() == 'iteration'


def test_plots_of_an_untrained_model_name_the_fix():
    with pytest.raises(ValueError, match='no training steps.*train'):
        MLP(CONFIG).plot_loss()
    with pytest.raises(ValueError, match='no training steps'):
        MLP(CONFIG).plot_lr()
