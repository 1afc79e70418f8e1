"""Pipeline definition: immutability, name resolution, composition, state and repr."""
import pickle

import numpy as np
import pytest

from flowpipe.batch import Batch, ImagesBatch
from flowpipe.config import Config
from flowpipe.data import Dataset
from flowpipe.errors import ExpressionError, UnknownActionError
from flowpipe.expr import B, C, V
from flowpipe.pipeline import ActionRecord, MaybeRecord, Pipeline

from .helpers import make_dataset


def test_chained_call_returns_new_pipeline_and_keeps_operand():
    base = Pipeline().init_variable('x', 0)
    longer = base.call(print, 1)
    assert longer is not base
    assert [record.name for record in base.actions] == ['init_variable']
    assert [record.name for record in longer.actions] == ['init_variable', 'call']


def test_records_are_frozen():
    record = Pipeline().call(print, 1, end='').actions[0]
    assert isinstance(record, ActionRecord)
    with pytest.raises(AttributeError):
        record.name = 'other'
    with pytest.raises(TypeError):
        record.kwargs['end'] = '!'


def test_pipeline_attributes_cannot_be_set():
    with pytest.raises(AttributeError, match='immutable'):
        Pipeline().dataset = make_dataset()


def test_use_lock_is_taken_out_of_the_arguments():
    record = Pipeline(make_dataset()).add(2, use_lock=True).actions[0]
    assert record.use_lock is True and record.args == (2,) and dict(record.kwargs) == {}
    with pytest.raises(TypeError, match='use_lock'):
        Pipeline(make_dataset()).add(use_lock='yes')


def test_typo_with_bound_dataset_fails_at_declaration_with_close_matches():
    with pytest.raises(UnknownActionError, match="'scale'"):
        Pipeline(make_dataset()).scael(2)


def test_typo_in_builtin_lists_builtins():
    with pytest.raises(UnknownActionError, match="'init_variable'"):
        Pipeline(make_dataset()).init_variabel('x')


def test_unbound_pipeline_accepts_unknown_names_until_bound():
    template = Pipeline().scael(2)
    with pytest.raises(UnknownActionError, match="'scale'"):
        template << make_dataset()


def test_private_names_are_plain_attribute_errors():
    with pytest.raises(AttributeError):
        Pipeline()._missing  # noqa: B018
    assert not hasattr(Pipeline(), '__array__')


def test_lshift_dataset_gives_new_pipeline_and_template_stays_unbound():
    template = Pipeline().add(1)
    dataset = make_dataset()
    bound = template << dataset
    assert bound.dataset is dataset and template.dataset is None
    assert bound.actions == template.actions


def test_lshift_config_merges_without_touching_operands():
    template = Pipeline(config={'model': {'lr': 0.1}, 'device': 'cpu'})
    merged = template << {'model/lr': 0.5} << Config({'microbatch': 4})
    assert merged.config['model/lr'] == 0.5 and merged.config['device'] == 'cpu'
    assert merged.config['microbatch'] == 4
    assert template.config['model/lr'] == 0.1 and 'microbatch' not in template.config


def test_lshift_rejects_other_things():
    with pytest.raises(TypeError, match='dataset or a config'):
        Pipeline() << Pipeline()
    with pytest.raises(TypeError, match='create_batch'):
        Pipeline() << 42


def test_rshift_from_dataset_or_config_binds_like_lshift():
    template = Pipeline(config={'device': 'cpu'}).add(1)
    dataset = make_dataset()
    bound = dataset >> template
    assert bound is not template and bound.dataset is dataset and template.dataset is None
    configured = {'model/lr': 0.5} >> (Config({'microbatch': 4}) >> bound)
    assert configured.config['model/lr'] == 0.5 and configured.config['microbatch'] == 4
    assert configured.config['device'] == 'cpu' and configured.dataset is dataset
    assert 'microbatch' not in bound.config and 'model/lr' not in template.config
    assert list(configured.next_batch(2).x) == list((template << dataset).next_batch(2).x)


def test_rshift_rejects_other_things():
    with pytest.raises(TypeError, match="dataset or a config.*before '>>'"):
        None >> Pipeline()
    with pytest.raises(TypeError, match='>>'):
        Pipeline() >> Pipeline()
    with pytest.raises(TypeError, match='create_batch'):
        42 >> Pipeline()


def test_constructor_checks_its_arguments():
    with pytest.raises(TypeError, match='config'):
        Pipeline(config=[1])
    with pytest.raises(TypeError, match='dataset'):
        Pipeline(dataset='data')


def test_add_concatenates_and_keeps_operands():
    first = Pipeline(config={'a': 1}).add(1).before.init_variable('v', 0)
    second = Pipeline(make_dataset(), config={'b': 2}).scale(2).after.call(print)
    both = first + second
    assert [record.name for record in both.actions] == ['add', 'scale']
    assert [record.name for record in both.before.actions] == ['init_variable']
    assert [record.name for record in both.after.actions] == ['call']
    assert both.dataset is second.dataset and dict(both.config) == {'a': 1, 'b': 2}
    assert [record.name for record in first.actions] == ['add'] and second.before.actions == ()


def test_mul_repeats_actions():
    template = Pipeline().add(1).scale(2)
    tripled = template * 3
    assert [record.name for record in tripled.actions] == ['add', 'scale'] * 3
    assert (3 * template).actions == tripled.actions
    assert len(template.actions) == 2
    with pytest.raises(ValueError, match='positive'):
        template * 0
    with pytest.raises(TypeError):
        template * 1.5


def test_matmul_wraps_actions_with_probability():
    maybe = Pipeline().add(1) @ 0.25
    assert len(maybe.actions) == 1 and isinstance(maybe.actions[0], MaybeRecord)
    assert maybe.actions[0].prob == 0.25
    with pytest.raises(ValueError, match=r'\[0, 1\]'):
        Pipeline().add(1) @ 1.5
    with pytest.raises(TypeError):
        Pipeline().add(1) @ 'often'


def test_sections_add_builtins_only():
    pipeline = Pipeline().before.init_variable('x', 1).after.call(print).add(1)
    assert isinstance(pipeline, Pipeline)
    assert [r.name for r in pipeline.before.actions] == ['init_variable']
    assert [r.name for r in pipeline.after.actions] == ['call']
    assert [r.name for r in pipeline.actions] == ['add']
    with pytest.raises(ValueError, match='built-in'):
        Pipeline().before.add(1)
    with pytest.raises(ValueError, match='built-in'):
        Pipeline().after.rebatch(2)
    with pytest.raises(UnknownActionError, match="'call'"):
        Pipeline().after.cal(print)


def test_builtin_arguments_are_checked_at_declaration():
    with pytest.raises(TypeError, match='variable name'):
        Pipeline().init_variable(3)
    with pytest.raises(TypeError, match='assignable'):
        Pipeline().update('x', 1)
    with pytest.raises(ValueError, match='mode'):
        Pipeline().update(V('x'), 1, mode='z')
    with pytest.raises(TypeError, match='func'):
        Pipeline().call()
    with pytest.raises(ValueError, match='batch_size'):
        Pipeline().rebatch(0)
    with pytest.raises(TypeError, match='pipelines'):
        Pipeline().join('other')


def test_variables_are_declared_on_first_access_with_fresh_defaults():
    template = Pipeline().init_variable('history', []).init_variable('n', C('start'))
    first = template << {'start': 5}
    second = template << {'start': 7}
    first.v('history').append(1)
    assert first.v('history') == [1] and second.v('history') == []
    assert first.v('n') == 5 and second.v('n') == 7
    assert template.actions[0].kwargs['default'] == []


def test_set_and_get_variable():
    pipeline = Pipeline()
    pipeline.set_variable('x', 3)
    assert pipeline.v('x') == 3 and pipeline.get_variable('x') == 3
    with pytest.raises(ExpressionError, match="'y'.*init_variable"):
        pipeline.v('y')


def test_reset_variables_restores_defaults():
    pipeline = Pipeline().init_variable('x', 1)
    pipeline.set_variable('x', 5)
    pipeline.reset('variables')
    assert pipeline.v('x') == 1
    with pytest.raises(ValueError, match='iter'):
        pipeline.reset('everything')


def test_missing_model_names_the_fix():
    with pytest.raises(ExpressionError, match='init_model'):
        Pipeline().m('net')


def test_new_pipelines_get_fresh_state():
    pipeline = Pipeline().init_variable('x', 0)
    pipeline.set_variable('x', 9)
    assert pipeline.call(print).v('x') == 0
    assert (pipeline << {'a': 1}).v('x') == 0


def test_dataset_p_gives_a_new_pipeline_each_time():
    dataset = make_dataset()
    first, second = dataset.p, dataset.p
    assert isinstance(first, Pipeline) and first is not second
    assert first.dataset is dataset and first.state is not second.state


def test_repr_lists_sections_and_actions():
    text = repr(Pipeline().before.init_variable('x', 0).add(1).scale(B('x')).after.call(print))
    assert 'before:' in text and 'after:' in text
    assert "init_variable(name='x', default=0)" in text
    assert 'add(1)' in text and "scale(B('x'))" in text


@pytest.mark.parametrize('module', ['pickle', 'dill'])
def test_pickle_keeps_definition_and_variables_and_names_the_models_left_behind(module):
    dumps, loads = (pickle.dumps, pickle.loads) if module == 'pickle' else _dill()
    pipeline = Pipeline(make_dataset(), config={'a': 1}).init_variable('x', 0).init_variable('seen', []).add(2)
    pipeline.set_variable('x', 5)
    pipeline.v('seen').extend([1, 2])
    restored = loads(dumps(pipeline))
    assert restored.actions == pipeline.actions and restored.config['a'] == 1
    assert restored.v('x') == 5 and restored.v('seen') == [1, 2]
    assert restored.v('seen') is not pipeline.v('seen')
    assert 'not carried over' not in repr(restored)
    pipeline.models['net'] = object()
    assert 'models not carried over by pickling: net' in repr(loads(dumps(pipeline)))


def _dill():
    dill = pytest.importorskip('dill')
    return dill.dumps, dill.loads


def test_typo_of_a_pipeline_method_suggests_it():
    with pytest.raises(UnknownActionError, match="'next_batch'"):
        Pipeline(make_dataset()).next_bach(2)


def test_config_property_cannot_change_the_definition():
    pipeline = Pipeline(config={'a': {'b': 1}})
    pipeline.config['a']['b'] = 2
    assert pipeline.config['a/b'] == 1


def _suggestion(pipeline, name):
    with pytest.raises(UnknownActionError) as caught:
        getattr(pipeline, name)
    return str(caught.value).split('Did you mean ')[1].split('?')[0]


def test_actions_are_suggested_before_pipeline_methods():
    images = Dataset(4, batch_class=ImagesBatch, preloaded={'images': np.zeros((4, 2, 2, 3), dtype='uint8')})
    assert _suggestion(images.p, 'resise') == "'resize' or the pipeline method 'reset'"
    assert _suggestion(Dataset(4, batch_class=Batch).p, 'resise') == "the pipeline method 'reset'"
    assert _suggestion(images.p, 'init_varaible').startswith("'init_variable' or the pipeline methods ")
