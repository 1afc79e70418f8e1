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
