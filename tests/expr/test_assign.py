"""assign(): save_to targets."""
import pytest

from flowpipe.expr import B, C, V, assign


def test_single_target_uses_its_mode(ctx):
    assign(V('history', mode='a'), 1, ctx)
    assign(V('history', mode='a'), 2, ctx)
    assert ctx.variables['history'] == [1, 2]


def test_explicit_mode(ctx):
    assign(V('history'), [1, 2], ctx, mode='e')
    assert ctx.variables['history'] == [1, 2]


def test_several_targets(ctx):
    assign([V('a'), B('b'), C('c')], (1, 2, 3), ctx)
    assert ctx.variables['a'] == 1 and ctx.batch.b == 2 and ctx.config['c'] == 3


def test_tuple_value_to_one_target(ctx):
    assign(V('pair'), (1, 2), ctx)
    assert ctx.variables['pair'] == (1, 2)


def test_none_target_discards(ctx):
    assign(None, 1, ctx)
    assert set(ctx.variables) == {'loss', 'history'}


def test_mismatched_number_of_values(ctx):
    with pytest.raises(ValueError, match=r"2 values.*int 5"):
        assign([V('a'), V('b')], 5, ctx)
    with pytest.raises(ValueError, match=r"2 values.*\(1, 2, 3\)"):
        assign([V('a'), V('b')], (1, 2, 3), ctx)


def test_non_assignable_targets(ctx):
    with pytest.raises(TypeError, match=r"Received: str 'loss'"):
        assign('loss', 1, ctx)
    with pytest.raises(TypeError, match=r"Received: V\('loss'\) \+ 1, which cannot be assigned"):
        assign(V('loss') + 1, 1, ctx)


def test_save_data_to_arrays_variables_and_lists():
    import numpy as np
    from flowpipe import Pipeline, save_data_to
    array = np.zeros(3)
    save_data_to(data=[1, 2, 3], dst=array)
    assert list(array) == [1, 2, 3]
    pipeline = Pipeline().init_variable('v')
    other = np.zeros(2)
    save_data_to(data=[[4, 5], 6], dst=[other, V('v')], pipeline=pipeline)
    assert list(other) == [4, 5] and pipeline.v('v') == 6
    save_data_to(data={'a': 7, 'b': 8}, dst={'a': V('v', mode='w')}, pipeline=pipeline)
    assert pipeline.v('v') == 7
    with pytest.raises(ValueError, match='one value per target'):
        save_data_to(data=[1], dst=[array, V('v')], pipeline=pipeline)


def test_save_data_to_config_points_to_the_flowpipe_form():
    from flowpipe import C, Config, Pipeline, save_data_to
    with pytest.raises(TypeError, match="pipeline << {key: value}.*porting"):
        save_data_to(data=200, dst=C('value'), pipeline=Pipeline(config=Config(some=100)))
