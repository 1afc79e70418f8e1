"""Model actions in pipelines: dynamic and static models, training, prediction, import, save and load."""
import numpy as np
import pytest
import torch

from flowpipe.errors import ExpressionError
from flowpipe.expr import B, C, D, M, V
from flowpipe.models.torch import MLP, SimpleCNN, TorchModel
from flowpipe.opensets import Digits
from flowpipe.pipeline import Pipeline
from flowpipe.pipeline.model_actions import PendingModel, model_seed

CONFIG = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
          'initial_block/inputs': 'images', 'body/filters': (4, 8)}


@pytest.fixture(scope='module')
def digits():
    return Digits()


def _train(name='net', **kwargs):
    return Pipeline().init_variable('loss', []).resize((12, 12)).to_array().train_model(
        name, fetches='loss', images=B.images, labels=B.labels, save_to=V('loss', mode='a'), use_lock=True, **kwargs)


def _template(*init_args, **init_kwargs):
    return Pipeline().init_variable('loss', []).init_model(*init_args, **init_kwargs) + _train()


def test_dynamic_model_is_built_from_the_batch_that_reaches_train_model(digits):
    pipeline = _template('dynamic', SimpleCNN, 'net', config=CONFIG) << digits.train
    pipeline.run(16, n_iters=3, seed=0)
    model = pipeline.m('net')
    assert isinstance(model, SimpleCNN) and model.spec.input_shape == (1, 12, 12)
    assert model.spec.num_outputs == 10 and model.iteration == 3
    assert len(pipeline.v('loss')) == 3 and all(isinstance(loss, float) for loss in pipeline.v('loss'))


@pytest.mark.parametrize('args, kwargs', [
    (('net', SimpleCNN), {'config': CONFIG}),
    (('net', SimpleCNN, 'dynamic', CONFIG), {}),
    ((), {'name': 'net', 'model_class': SimpleCNN, 'config': CONFIG}),
    (('dynamic', SimpleCNN, 'net', CONFIG), {}),
])
def test_both_argument_orders(digits, args, kwargs):
    pipeline = _template(*args, **kwargs) << digits.train
    pipeline.next_batch(8, seed=0)
    assert isinstance(pipeline.m('net'), SimpleCNN)


def test_same_model_and_losses_with_and_without_prefetch(digits):
    results = []
    for prefetch in (0, 2):
        torch.manual_seed(0)  # the network's initial weights come from torch's global generator
        pipeline = _template('dynamic', SimpleCNN, 'net', config=CONFIG) << digits.train
        pipeline.run(16, n_iters=4, shuffle=5, prefetch=prefetch)
        results.append((pipeline.v('loss'), pipeline.m('net').predict(images=np.ones((2, 1, 12, 12), 'float32'))))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])


def _initial_weights(digits, **run_args):
    pipeline = (Pipeline().init_model('dynamic', SimpleCNN, 'net', config=CONFIG).resize((12, 12)).to_array()
                .predict_model('net', images=B.images)) << digits.train
    pipeline.next_batch(8, **run_args)
    return [p.detach().clone() for p in pipeline.m('net').model.parameters()]


def test_the_run_seed_makes_initial_weights_reproducible_and_leaves_torch_generator_alone(digits):
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    first, again = _initial_weights(digits, seed=7), _initial_weights(digits, seed=7)
    by_shuffle, other = _initial_weights(digits, shuffle=7), _initial_weights(digits, seed=8)
    assert torch.equal(torch.random.get_rng_state(), before)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert all(torch.equal(a, b) for a, b in zip(first, by_shuffle))  # an int shuffle= is the run's seed
    assert not torch.equal(first[0], other[0])  # the first convolution (batch norm starts at ones and zeros)


def test_without_a_run_seed_torch_manual_seed_decides_the_initial_weights(digits):
    torch.manual_seed(5)
    first = _initial_weights(digits)
    torch.manual_seed(5)
    again = _initial_weights(digits)
    other = _initial_weights(digits)  # the global generator has moved on
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0])


def test_model_seed_depends_on_the_root_and_the_name():
    assert model_seed(7, 'net') == model_seed(7, 'net')
    assert len({model_seed(7, 'net'), model_seed(8, 'net'), model_seed(7, 'other')}) == 3
    assert 0 <= model_seed(2 ** 100, 'net') < 2 ** 64


def test_static_model_is_built_at_declaration_and_shared_by_derived_pipelines(digits):
    config = {'inputs/images/shape': (1, 12, 12), 'inputs/labels/classes': 10, 'body/filters': (4,)}
    template = _template('static', SimpleCNN, 'net', config=config)
    first, second = template << digits.train, template << digits.test
    first.next_batch(8, seed=0)
    second.next_batch(8, seed=0)
    assert first.m('net') is second.m('net')
    assert first.m('net').iteration == 2


def test_static_model_config_must_be_batch_free():
    with pytest.raises(ValueError, match="mode='dynamic'"):
        Pipeline().init_model('static', SimpleCNN, 'net', config=CONFIG)


def test_bad_init_model_arguments_fail_at_declaration():
    with pytest.raises(ValueError, match='mode'):
        Pipeline().init_model('net', SimpleCNN, 'eager')
    with pytest.raises(TypeError, match='model name'):
        Pipeline().init_model(3, SimpleCNN)
    with pytest.raises(TypeError, match='init_model'):
        Pipeline().init_model()


def test_predict_model_and_fetch_lists(digits):
    trained = _template('dynamic', SimpleCNN, 'net', config=CONFIG) << digits.train
    trained.run(32, n_iters=2, seed=0)
    predict = (Pipeline().init_variable('labels', []).init_variable('proba', []).import_model('net', trained)
               .resize((12, 12)).to_array()
               .predict_model('net', images=B.images, outputs=['labels', 'proba'],
                              save_to=[V('labels', mode='e'), V('proba', mode='a')])) << digits.test
    predict.run(100, n_epochs=1)
    assert len(predict.v('labels')) == len(digits.test)
    assert [len(batch) for batch in predict.v('proba')] == [100, 100, 100, 60]
    assert predict.m('net') is trained.m('net')


def test_m_expression_and_import_of_a_model_object(digits):
    model = MLP({'inputs/images/shape': (1, 12, 12), 'inputs/labels/classes': 10})
    pipeline = (Pipeline().init_variable('seen', None).import_model('mlp', model)
                .update(V('seen'), M('mlp')) + _train('mlp')) << digits.train
    pipeline.next_batch(8, seed=0)
    assert pipeline.v('seen') is model and pipeline.m('mlp') is model and model.iteration == 1


def test_importing_a_model_that_is_not_built_yet_fails_clearly(digits):
    source = _template('dynamic', SimpleCNN, 'net', config=CONFIG) << digits.train
    source.state.models['net'] = PendingModel('net', SimpleCNN, CONFIG)
    pipeline = Pipeline().import_model('net', source) << digits.test
    with pytest.raises(ValueError, match='Run the source pipeline'):
        pipeline.next_batch(4)


def test_save_and_load_actions(digits, tmp_path):
    path = str(tmp_path / 'net.pkl')
    trained = (_template('dynamic', SimpleCNN, 'net', config=CONFIG) << digits.train).save_model('net', path)
    trained.run(16, n_iters=2, seed=0)
    expected = trained.m('net').predict(images=np.ones((3, 1, 12, 12), 'float32'))
    for args in [(path,), (SimpleCNN, path)]:
        loaded = Pipeline().load_model('net', *args, config={'device': 'cpu'}) << digits.test
        loaded.next_batch(4)
        np.testing.assert_array_equal(loaded.m('net').predict(images=np.ones((3, 1, 12, 12), 'float32')), expected)
    in_place = (_template('dynamic', SimpleCNN, 'net', config=CONFIG) + Pipeline().load_model('net', path)
                ) << digits.train
    in_place.next_batch(16, seed=1)
    assert in_place.m('net').iteration == 2


def test_batchflow_forms_of_load_model_and_load_model_now(digits, tmp_path):
    path = str(tmp_path / 'net.pkl')
    trained = (_template('dynamic', SimpleCNN, 'net', config=CONFIG) << digits.train).save_model('net', path)
    trained.run(16, n_iters=2, seed=0)
    expected = trained.m('net').predict(images=np.ones((3, 1, 12, 12), 'float32'))
    action = Pipeline().load_model('net', C('model_class'), 'dynamic', path=path) << digits.test
    now = Pipeline() << digits.test << {'model_class': SimpleCNN}
    now.load_model_now('net', C('model_class'), 'dynamic', path=path)
    for pipeline in [action << {'model_class': SimpleCNN}, now]:
        pipeline.next_batch(4)
        assert type(pipeline.m('net')) is SimpleCNN
        np.testing.assert_array_equal(pipeline.m('net').predict(images=np.ones((3, 1, 12, 12), 'float32')),
                                      expected)
    with pytest.raises(ValueError, match="'dynamic'"):
        (Pipeline().load_model('net', SimpleCNN, 'static', path=path) << digits.test).next_batch(4)
    with pytest.raises(TypeError, match='positional arguments and path='):
        (Pipeline().load_model('net', SimpleCNN, 'dynamic', path, path=path) << digits.test).next_batch(4)


@pytest.mark.parametrize('loader', [
    lambda path: Pipeline().load_model('net', MLP, path),
    lambda path: Pipeline().init_model('dynamic', SimpleCNN, 'net', config=CONFIG).load_model('net', path),
    lambda path: Pipeline().import_model('net', MLP({'inputs/images/shape': (1, 12, 12),
                                                     'inputs/labels/classes': 10})).load_model('net', path),
], ids=['new-model', 'pending-model', 'in-place'])
def test_load_model_in_the_main_chain_loads_once(digits, tmp_path, loader):
    path = str(tmp_path / 'net.pkl')
    file_model = MLP({'inputs/images/shape': (1, 12, 12), 'inputs/labels/classes': 10})
    file_model.iteration = 7
    file_model.save(path)
    saved = [p.detach().clone() for p in file_model.model.parameters()]
    pipeline = (loader(path) + _train()) << digits.train
    pipeline.run(16, n_iters=3, seed=1)
    model = pipeline.m('net')
    assert model.iteration == 7 + 3
    assert not any(torch.equal(a, b) for a, b in zip(saved, model.model.parameters()))
    pipeline.run(16, n_iters=1, seed=2)  # a second run trains on as well
    assert pipeline.m('net') is model and model.iteration == 11
    pipeline.reset('models')
    pipeline.next_batch(16, seed=3)
    assert pipeline.m('net').iteration == 7 + 1


def test_model_action_errors(digits):
    with pytest.raises(ValueError, match="Did you mean 'loss'"):
        Pipeline().train_model('net', fetches='los')
    with pytest.raises(ValueError, match='not both'):
        Pipeline().train_model('net', fetches='loss', outputs='loss')
    pipeline = Pipeline().to_array().train_model('ghost', images=B.images) << digits.train
    with pytest.raises(ExpressionError, match='init_model'):
        pipeline.next_batch(4)


def test_default_model_class_needs_a_network(digits):
    pipeline = Pipeline().init_model('net', config={'loss': 'ce'}) + _train() << digits.train
    with pytest.raises(ValueError, match="'model'"):
        pipeline.next_batch(4)
    assert TorchModel  # the default class of init_model


def test_a_declared_model_and_its_plan_can_be_inspected_before_the_first_batch(digits):
    config = {**CONFIG, 'device': C('device'), 'microbatch': C('microbatch', default=None)}
    pipeline = _template('dynamic', SimpleCNN, 'net', config=config) << digits.train << {
        'device': ['CPU:0', 'CPU:1'], 'microbatch': 16}
    pending = pipeline.m('net')
    assert isinstance(pending, PendingModel) and 'device_plan(batch_size)' in repr(pending)
    text = pending.device_plan(40)
    assert '2 replicas' in text and 'chunk sizes [16, 16, 8]' in text and 'not built yet' in text
    assert pending.placement()['device'] == ['CPU:0', 'CPU:1']
    pipeline.run(40, n_iters=1, seed=0)
    model = pipeline.m('net')
    model.close()
    built = model.device_plan(40)
    assert isinstance(model, SimpleCNN) and 'not built' not in built
    assert built.splitlines()[0] == text.splitlines()[0] and 'chunk sizes [16, 16, 8]' in built


def test_a_plan_that_depends_on_the_batch_says_so_and_unknown_names_still_fail(digits):
    pipeline = _template('dynamic', SimpleCNN, 'net', config={**CONFIG, 'microbatch': B.size}) << digits.train
    with pytest.raises(ValueError, match="can be read before the first batch to show the plan of 'net'"):
        pipeline.m('net').device_plan(8)
    with pytest.raises(ExpressionError, match="no model 'other'"):
        pipeline.m('other')
    static = Pipeline().init_model('static', MLP, 'mlp', config={'inputs/x/shape': (4,), 'inputs/y/classes': 2})
    assert isinstance(static.m('mlp'), MLP) and static.m('mlp') is static.m('mlp')


@pytest.mark.slow     # worker processes: run in CI or with FLOWPIPE_SLOW=1
def test_a_pipeline_whose_model_exists_runs_again_with_processes(digits):
    pipeline = (Pipeline().init_variable('loss', []).resize((12, 12)).to_array().rebatch(16)
                .init_model('net', SimpleCNN, config=CONFIG)
                .train_model('net', fetches='loss', images=B.images, labels=B.labels,
                             save_to=V('loss', mode='a'), use_lock=True)) << digits.train
    pipeline.run(16, n_iters=2, seed=0, prefetch=2, target='processes')
    model = pipeline.m('net')
    pipeline.run(16, n_iters=2, seed=1, prefetch=2, target='processes')     # the runner, model included, is pickled
    assert pipeline.m('net') is model and model.iteration == 4 and len(pipeline.v('loss')) == 4


@pytest.mark.parametrize('device', ['cpu', ['CPU:0', 'CPU:1']])
def test_a_model_pickles_through_its_file_contents(device):
    import pickle

    import dill
    config = {'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10, 'initial_block/inputs': 'images',
              'device': device}
    images, labels = np.random.default_rng(0).random((6, 1, 8, 8), dtype=np.float32), np.arange(6)
    with MLP(config) as model:
        model.train(images=images, labels=labels)
        for module in (pickle, dill):
            state = torch.random.get_rng_state()
            with module.loads(module.dumps(model)) as copy:
                assert torch.equal(torch.random.get_rng_state(), state)     # loading drew no weights from it
                assert copy.iteration == 1 and copy.plan == model.plan
                np.testing.assert_array_equal(copy.predict(images=images), model.predict(images=images))
                with pickle.loads(pickle.dumps(model)) as other:
                    assert copy.train(images=images, labels=labels, fetches='loss', seed=3) == \
                        other.train(images=images, labels=labels, fetches='loss', seed=3)
    pending = MLP({**config, 'inputs/images/shape': None})         # built at its first step
    again = pickle.loads(pickle.dumps(pending))
    assert again.engine is None
    first, second = pending.train(images=images, labels=labels, fetches='loss', seed=1), \
        again.train(images=images, labels=labels, fetches='loss', seed=1)
    assert first == second
    pending.close()
    again.close()


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(144, 10))

    def forward(self, images):
        return self.layers(images)


@pytest.mark.parametrize('mode', ['dynamic', 'static'])
def test_a_plain_module_class_is_taken_as_the_models_network(digits, mode):
    config = {'inputs/images/shape': (1, 12, 12), 'inputs/labels/classes': 10, 'initial_block/inputs': 'images'}
    pipeline = _template(mode, _Net, 'net', config=config) << digits.train
    pipeline.run(16, n_iters=2, seed=0)
    model = pipeline.m('net')
    assert type(model) is TorchModel and isinstance(model.model, _Net) and model.iteration == 2
    with pytest.raises(ValueError, match="network given once.*model_class=_Net"):
        Pipeline().init_model('net', _Net, config={**config, 'model': _Net()})


def test_a_seeded_run_says_it_cannot_seed_a_network_given_as_an_instance():
    import warnings as _warnings

    import numpy as _np
    import torch as _torch
    from torch import nn as _nn

    from flowpipe import B as _B, Dataset as _Dataset, Pipeline as _Pipeline
    data = _Dataset(8, preloaded={'x': _np.ones((8, 4), 'float32'), 'y': _np.arange(8) % 3})

    def run(network, seed):
        config = {'model': network, 'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'loss': 'ce'}
        pipeline = _Pipeline().init_model('net', config=config).train_model('net', x=_B.x, y=_B.y) << data
        with _warnings.catch_warnings(record=True) as caught:
            _warnings.simplefilter('always')
            pipeline.run(4, n_epochs=1, seed=seed)
        return pipeline.m('net').model, [str(w.message) for w in caught if 'initial weights' in str(w.message)]
    from flowpipe.pipeline import run_seeds
    run_seeds.SAID_INSTANCE.clear()
    _, said = run(_nn.Linear(4, 3), seed=3)
    assert len(said) == 1 and "model 'net'" in said[0] and "'model': Linear" in said[0]
    assert run(_nn.Linear(4, 3), seed=3)[1] == []                # said once
    assert run(_nn.Linear(4, 3), seed=None)[1] == []            # no seed given: torch's generator decides
    first, said = run(lambda: _nn.Linear(4, 3), seed=3)
    second, _ = run(lambda: _nn.Linear(4, 3), seed=3)
    assert said == [] and _torch.equal(first.weight, second.weight)      # a function: made under the seed
