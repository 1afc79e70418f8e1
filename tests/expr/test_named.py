"""B, C, V, D, M: reading, writing with modes, and errors for missing names."""
import threading

import pytest

from flowpipe.config import Config
from flowpipe.errors import ExpressionError
from flowpipe.expr import B, C, D, M, V
from flowpipe.expr.named import check_mode


def test_batch_components_and_batch(ctx):
    assert B('labels').get(ctx) is ctx.batch.labels
    assert B.labels.get(ctx) is ctx.batch.labels
    assert B().get(ctx) is ctx.batch
    assert B('missing', default=None).get(ctx) is None


def test_missing_batch_component_names_components(ctx):
    with pytest.raises(ExpressionError) as info:
        B.imagse.get(ctx)
    message = str(info.value)
    assert "B('imagse')" in message and "'images'" in message and "'labels'" in message
    assert "Did you mean 'images'" in message
    assert isinstance(info.value, KeyError)


def test_batch_write_modes(ctx):
    B('masks').set([1], ctx)
    assert ctx.batch.masks == [1]
    B('masks').set(2, ctx, mode='a')
    B('masks', mode='e').set([3, 4], ctx)
    assert ctx.batch.masks == [1, 2, 3, 4]
    B('meta', mode='u').set({'a': 1}, ctx)
    B('meta', mode='u').set({'b': 2}, ctx)
    assert ctx.batch.meta == {'a': 1, 'b': 2}


def test_batch_itself_is_not_assignable(ctx):
    with pytest.raises(TypeError, match=r"B\(\), the batch itself"):
        B().set(1, ctx)


def test_batch_name_must_be_a_string():
    with pytest.raises(TypeError, match='Received: name=3'):
        B(3)


def test_variables_read_and_default(ctx):
    assert V('loss').get(ctx) == 0.5
    assert V.loss.get(ctx) == 0.5
    assert V('nothing', default=0).get(ctx) == 0


def test_missing_variable_lists_variables(ctx):
    with pytest.raises(ExpressionError) as info:
        V('los').get(ctx)
    message = str(info.value)
    assert "V('los')" in message and "'history'" in message and "Did you mean 'loss'" in message
    assert 'init_variable' in message


def test_variable_modes(ctx):
    V('loss').set(0.25, ctx)
    assert ctx.variables['loss'] == 0.25
    V('history', mode='a').set(1, ctx)
    V('history').set([2, 3], ctx, mode='e')
    assert ctx.variables['history'] == [1, 2, 3]
    V('seen', mode='u').set({1, 2}, ctx)
    V('seen', mode='u').set({3}, ctx)
    assert ctx.variables['seen'] == {1, 2, 3}
    V('fresh', mode='a').set('x', ctx)
    assert ctx.variables['fresh'] == ['x']


def test_explicit_mode_overrides_the_expressions_mode(ctx):
    V('history', mode='a').set([9], ctx, mode='w')
    assert ctx.variables['history'] == [9]


def test_append_to_a_number_is_a_type_error(ctx):
    with pytest.raises(TypeError, match=r"V\('loss', mode='a'\).*a list.*float 0.5"):
        V('loss', mode='a').set(1, ctx)


def test_concurrent_appends_are_not_lost(ctx):
    def work():
        for i in range(200):
            V('counter', mode='a').set(i, ctx)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ctx.variables['counter']) == 800


def test_config_read_with_paths_and_default(ctx):
    assert C('device').get(ctx) == 'cpu'
    assert C.device.get(ctx) == 'cpu'
    assert C('model/lr').get(ctx) == 0.1
    assert C('model').get(ctx) == {'lr': 0.1}
    assert C('microbatch', default=None).get(ctx) is None
    assert C().get(ctx) is ctx.config


def test_config_read_from_plain_dict_or_none(ctx):
    ctx.config = {'a': {'b': 1}}
    assert C('a/b').get(ctx) == 1
    ctx.config = None
    assert C('a', default=2).get(ctx) == 2


def test_missing_config_key_lists_keys(ctx):
    with pytest.raises(ExpressionError) as info:
        C('devise').get(ctx)
    message = str(info.value)
    assert "C('devise')" in message and "'model/lr'" in message and "Did you mean 'device'" in message


def test_config_write(ctx):
    C('model/lr').set(0.01, ctx)
    assert ctx.config['model/lr'] == 0.01
    C('seen', mode='a').set(1, ctx)
    assert ctx.config['seen'] == [1]
    ctx.config = None
    C('x/y').set(3, ctx)
    assert isinstance(ctx.config, Config) and ctx.config['x/y'] == 3


def test_dataset_attributes(ctx):
    assert D('num_classes').get(ctx) == 2
    assert D.num_classes.get(ctx) == 2
    assert D().get(ctx) is ctx.dataset


def test_missing_dataset_attribute_lists_attributes(ctx):
    with pytest.raises(ExpressionError, match=r"D\('num_class'\).*'name'.*Did you mean 'num_classes'"):
        D.num_class.get(ctx)


def test_unbound_dataset(ctx):
    ctx.dataset = None
    with pytest.raises(ExpressionError, match=r"not bound to a dataset.*pipeline << dataset"):
        D.num_classes.get(ctx)
    assert D('num_classes', default=10).get(ctx) == 10


def test_dataset_and_model_are_not_assignable(ctx):
    with pytest.raises(TypeError, match=r"Received: D\('num_classes'\), which cannot be assigned"):
        D.num_classes.set(3, ctx)
    with pytest.raises(TypeError, match=r"M\('net'\)"):
        M('net').set(3, ctx)


def test_models(ctx):
    assert M('net').get(ctx) == 'the model'
    assert M.net.get(ctx) == 'the model'
    with pytest.raises(ExpressionError, match=r"M\('nett'\).*\['net'\].*init_model"):
        M('nett').get(ctx)


def test_modes_are_validated():
    assert check_mode('append') == 'a'
    with pytest.raises(ValueError, match=r"Received: mode='x'"):
        V('a', mode='x')


def test_reprs():
    assert repr(B.images) == "B('images')"
    assert repr(B()) == 'B()'
    assert repr(V('x', mode='a')) == "V('x', mode='a')"
    assert repr(C('device', default=None)) == "C('device', default=None)"
    assert repr(M('net')) == "M('net')"


def test_names_are_required_for_v_and_m():
    with pytest.raises(TypeError, match='V\\(name\\)'):
        V(None)
    with pytest.raises(TypeError, match='M\\(name\\)'):
        M(None)


def test_batch_component_without_a_batch(ctx):
    ctx.batch = None
    with pytest.raises(ExpressionError, match=r"B\('images'\): there is no batch here"):
        B.images.get(ctx)
    assert B('images', default=0).get(ctx) == 0


def test_missing_names_include_batch_properties(ctx):
    class PropertyBatch:
        components = ('images',)

        @property
        def image_shape(self):
            return (3, 3)

    ctx.batch = PropertyBatch()
    with pytest.raises(ExpressionError, match="Did you mean 'image_shape'"):
        B.image_shap.get(ctx)
