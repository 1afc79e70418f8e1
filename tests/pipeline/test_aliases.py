"""batchflow's pipeline method names (thin aliases) and the errors for in-place changes."""
import numpy as np
import pytest

from flowpipe import B, C, Dataset, Pipeline, V

from .helpers import make_dataset


def test_namespaces_make_plain_functions_actions():
    pipeline = make_dataset().p.add_namespace(np).init_variable('m').mean(B().x, save_to=V('m'))
    pipeline.next_batch(4)
    assert pipeline.v('m') == 1.5
    assert pipeline.actions[-1].name == 'call'


def test_namespace_by_name_and_batch_actions_first():
    pipeline = make_dataset().p.add_namespace('math').add(2).init_variable('s').sqrt(16, save_to=V('s'))
    batch = pipeline.next_batch(2)
    assert list(batch.x) == [2, 3] and pipeline.v('s') == 4.0
    unbound = Pipeline().add_namespace(np).resize(8)      # an ImagesBatch action, not numpy's resize
    assert unbound.actions[-1].name == 'resize'


def test_namespaces_survive_pickling():
    import pickle
    pipeline = pickle.loads(pickle.dumps(Pipeline().add_namespace(np)))
    assert pipeline.sum(1).actions[-1].args[0] is np.sum


def test_bad_namespace():
    with pytest.raises(TypeError, match='namespace'):
        Pipeline().add_namespace(3)


def test_variables():
    pipeline = make_dataset().p.init_variables('a', {'b': 1}, ['c']).update_variable('a', B().size)
    pipeline.next_batch(3)
    assert (pipeline.v('a'), pipeline.v('b'), pipeline.v('c')) == (3, 1, None)
    assert pipeline.has_variable('b') and not pipeline.has_variable('z')
    pipeline.assign_variable('z', 5)
    assert pipeline.get_variable('z') == 5
    pipeline.delete_variable('z')
    assert not pipeline.has_variable('z')
    pipeline.set_variable('b', 7)
    pipeline.delete_all_variables()
    assert pipeline.v('b') == 1


def test_models_and_running(tmp_path):
    from flowpipe.models.torch import MLP
    config = {'inputs/x/shape': (1,), 'inputs/y/classes': 2, 'initial_block/inputs': 'x'}
    template = Pipeline().init_model('net', MLP, config=config).train_model('net', x=B().x[:, None] * 1.0,
                                                                             y=B().x % 2)
    pipeline = template << make_dataset()
    assert pipeline.num_actions == 2
    lazy = pipeline.run_later(4, n_epochs=1)
    assert lazy.run_args.batch_size == 4
    lazy.run_now()
    assert lazy.get_model_by_name('net') is lazy.m('net') is lazy.model
    lazy.save_model_now('net', tmp_path / 'net.pt')
    other = template << make_dataset()
    other.load_model_now('net', path=tmp_path / 'net.pt')
    assert other.m('net').iteration == lazy.m('net').iteration == 3


def test_model_property_needs_one_model():
    with pytest.raises(ValueError, match='exactly one model'):
        _ = Pipeline().model


@pytest.mark.parametrize('method, args', [('set_config', ({'a': 1},)), ('update_config', ({'a': 1},)),
                                          ('set_dataset', (None,))])
def test_in_place_changes_point_to_the_flowpipe_form(method, args):
    with pytest.raises(TypeError, match='immutable.*<<.*docs/porting.md'):
        getattr(Pipeline(), method)(*args)


def test_dataset_chosen_by_an_expression_is_refused():
    dataset = Dataset(10)
    dataset.cv_split(n_splits=2)
    with pytest.raises(TypeError, match='named expression.*cv\\(0\\).train.*porting'):
        _ = Pipeline() << dataset.CV(C('fold')).train


def test_reset_forms():
    pipeline = make_dataset().p.init_variable('v', 0).update(V('v'), B().size)
    pipeline.next_batch(2)
    assert pipeline.reset('vars').v('v') == 0
    pipeline.next_batch(3)
    assert pipeline.reset(['iter', 'variables']).v('v') == 0
    assert pipeline.reset(None) is pipeline and pipeline.reset(True) is pipeline


def test_notifier_is_bar(capsys):
    import io
    stream = io.StringIO()
    make_dataset().p.run(5, notifier={'bar': 't', 'file': stream})
    assert '2/2' in stream.getvalue()
    with pytest.raises(ValueError, match='not both'):
        make_dataset().p.run(5, bar=True, notifier=True)
    assert len(list(make_dataset().p.gen_batch(5, notifier=False))) == 2
