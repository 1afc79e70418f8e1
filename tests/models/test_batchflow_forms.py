"""TorchModel with batchflow's habits: config key names, outputs=, a shape taken from the first batch, info(),
per-operation profiling."""
import numpy as np
import pytest
import torch

from flowpipe import B, C, D, Dataset, ImagesBatch, Pipeline, V
from flowpipe.models.torch import MLP, SimpleCNN


def _images(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 1, 8, 8)).astype('float32'), rng.integers(0, 3, n)


def test_batchflow_key_names():
    model = MLP({'inputs_shapes': (1, 8, 8), 'classes': 3, 'microbatch_size': 2})
    assert model.spec.shapes == {'images': (1, 8, 8)} and model.spec.classes == {'labels': 3}
    assert model.plan.microbatch == 2
    images, labels = _images()
    loss = model.train(images, labels, outputs='loss')
    assert isinstance(loss, float)
    assert model.predict(images, outputs='labels').shape == (6,)
    with pytest.raises(ValueError, match='not both'):
        MLP({'inputs_shapes': (1, 8, 8), 'classes': 3, 'microbatch': 4, 'microbatch_size': 2})
    with pytest.raises(ValueError, match='not both'):
        model.train(images, labels, fetches='loss', outputs='loss')


def test_ready_network_takes_the_input_shape_from_the_first_step():
    images, labels = _images()
    torch.manual_seed(3)
    model = SimpleCNN({'inputs/labels/classes': 3, 'body/filters': (4,)})
    assert 'first step' in repr(model)
    with pytest.raises(ValueError, match='first train or predict step'):
        _ = model.model
    torch.manual_seed(3)
    eager = SimpleCNN({'inputs/labels/classes': 3, 'body/filters': (4,), 'inputs/images/shape': (1, 8, 8)})
    torch.manual_seed(99)    # the deferred build uses the generator state of the model's creation
    model.train(images, labels)
    assert model.spec.shapes['images'] == (1, 8, 8) and model.config['inputs']['images']['shape'] == (1, 8, 8)
    fresh = SimpleCNN({'inputs/labels/classes': 3, 'body/filters': (4,), 'inputs/images/shape': (1, 8, 8)})
    eager.optimizer.load_state_dict(fresh.optimizer.state_dict())
    eager.train(images, labels)
    for mine, theirs in zip(model.model.parameters(), eager.model.parameters()):
        assert torch.equal(mine, theirs)


def test_info_lists_the_config():
    model = MLP({'inputs_shapes': (4,), 'classes': 2, 'body/units': (5,)})
    text = model.info()
    assert text.startswith('MLP(') and 'body/units: (5,)' in text and 'inputs/labels/classes: 2' in text


def test_profile_collects_operations():
    pd = pytest.importorskip('pandas')
    model = MLP({'inputs_shapes': (4,), 'classes': 2, 'profile': True})
    x = np.random.default_rng(0).normal(size=(8, 4)).astype('float32')
    for _ in range(2):
        model.train(x, (x[:, 0] > 0).astype('int64'))
    assert {row['iter'] for row in model.profiler.rows} == {0, 1}
    table = model.show_profile_info(limit=3)
    assert isinstance(table, pd.DataFrame) and len(table) == 3
    assert len(model.show_profile_info(per_iter=True, limit=2)) == 4
    with pytest.raises(ValueError, match="'profile': True"):
        MLP({'inputs_shapes': (4,), 'classes': 2}).show_profile_info()


def test_model_class_from_a_named_expression_and_shape_from_the_batch():
    images, labels = _images(12)
    dataset = Dataset(12, batch_class=ImagesBatch, preloaded={'images': images, 'labels': labels}, num_classes=3)
    template = (Pipeline()
                .init_variable('loss', [])
                .init_model('net', C('model'), 'dynamic', config={'inputs/labels/classes': D.num_classes})
                .train_model('net', B.images, B.labels, fetches='loss', save_to=V('loss', mode='a')))
    pipeline = template << dataset << {'model': MLP}
    pipeline.run(4, n_epochs=1, seed=1)
    assert isinstance(pipeline.m('net'), MLP) and len(pipeline.v('loss')) == 3
    again = template << dataset << {'model': MLP}
    again.run(4, n_epochs=1, seed=1)
    assert again.v('loss') == pipeline.v('loss')
    with pytest.raises(ValueError, match='static'):
        Pipeline().init_model('net', C('model'), 'static')
