"""Expression algebra, evaluate and contains_expressions."""
import collections
import operator

import numpy as np
import pytest

from flowpipe.config import Config
from flowpipe.expr import B, C, Expression, V, W, contains_expressions, evaluate


@pytest.mark.parametrize('op, expected', [
    (operator.add, 2.5), (operator.sub, -1.5), (operator.mul, 1.0), (operator.truediv, 0.25),
    (operator.floordiv, 0.0), (operator.mod, 0.5), (operator.pow, 0.25)])
def test_binary_operators_both_sides(ctx, op, expected):
    assert op(V('loss'), 2).get(ctx) == expected
    assert op(2, V('loss')).get(ctx) == op(2, 0.5)


def test_two_expressions_combine(ctx):
    assert (V('loss') * B.size).get(ctx) == 2.0
    assert (-V('loss')).get(ctx) == -0.5
    assert abs(V('loss') - 1).get(ctx) == 0.5


@pytest.mark.parametrize('op', [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne])
def test_comparisons_build_expressions(ctx, op):
    expr = op(V('loss'), 0.5)
    assert isinstance(expr, Expression)
    assert expr.get(ctx) == op(0.5, 0.5)


def test_logical_operators(ctx):
    assert ((V('loss') > 0) & (B.size == 4)).get(ctx)
    assert not ((V('loss') > 1) | (B.size < 4)).get(ctx)
    assert list((~(B.labels == 1)).get(ctx)) == [True, False, True, False]


def test_bool_raises_with_advice(ctx):
    with pytest.raises(TypeError, match=r"Combine expressions with &"):
        bool(V('loss') > 0)
    with pytest.raises(TypeError, match=r"V\('loss'\) > 0"):
        if V('loss') > 0:
            pass


def test_iteration_and_membership_raise():
    with pytest.raises(TypeError, match='Index it'):
        list(B.images)
    with pytest.raises(TypeError, match="Expected a container"):
        1 in B.images


def test_expressions_hash_by_identity():
    first, second = B.images, B.images
    table = {first: 1, second: 2}
    assert table[first] == 1 and table[second] == 2


def test_item_attr_and_call(ctx):
    assert B.images[1, 2].get(ctx) == 5.0
    assert B.images[C('row', default=1)].get(ctx)[0] == 3.0
    assert B.images.shape.get(ctx) == (4, 3)
    assert B.images.sum(axis=0)[0].get(ctx) == 18.0


def test_str_and_format(ctx):
    assert V('loss').str().get(ctx) == '0.5'
    assert C('device').str().format().get(ctx) == 'cpu'
    assert V('template', default='run_{}_{x}').format(B.size, x=C('device')).get(ctx) == 'run_4_cpu'


def test_numpy_arrays_defer_to_expressions(ctx):
    expr = np.array([1.0, 2.0]) + V('loss')
    assert isinstance(expr, Expression)
    assert list(expr.get(ctx)) == [1.5, 2.5]


def test_repr_is_readable():
    assert repr(V('loss') + 1) == "V('loss') + 1"
    assert repr((V('a') + 1) * B.size) == "(V('a') + 1) * B('size')"
    assert repr(-B.images[0]) == "-B('images')[0]"
    assert repr(B.images.shape) == "B('images').shape"
    assert repr(V('x').str()) == "V('x').str()"
    assert repr(abs(V('x'))) == "abs(V('x'))"


def test_private_attributes_are_not_expressions():
    with pytest.raises(AttributeError):
        B.images._secret


def test_evaluate_walks_containers(ctx):
    Point = collections.namedtuple('Point', 'x y')
    args = [V('loss'), (B.size, 'const'), {'k': C('device'), B.size: 1}, Point(V('loss'), 2), {B.size}]
    result = evaluate(args, ctx)
    assert result == [0.5, (4, 'const'), {'k': 'cpu', 4: 1}, Point(0.5, 2), {4}]
    assert isinstance(result[3], Point)


def test_evaluate_walks_configs_and_dict_subclasses(ctx):
    cfg = Config({'inputs/images/shape': B.images.shape, 'device': C('device')})
    result = evaluate(cfg, ctx)
    assert isinstance(result, Config)
    assert result['inputs/images/shape'] == (4, 3) and result['device'] == 'cpu'
    assert isinstance(cfg['device'], Expression)
    table = collections.defaultdict(list, {'a': V('loss')})
    evaluated = evaluate(table, ctx)
    assert evaluated['a'] == 0.5 and evaluated['missing'] == []


def test_evaluate_keeps_constants_identical(ctx):
    constant = [1, (2, 3), {'a': [4]}, {5}]
    assert evaluate(constant, ctx) is constant
    mixed = [constant, V('loss')]
    assert evaluate(mixed, ctx)[0] is constant


def test_evaluate_leaves_wrapped_expressions(ctx):
    inner = V('loss') + 1
    assert evaluate(W(inner), ctx) is inner
    wrapped = evaluate({'x': W(B.size)}, ctx)['x']
    assert repr(wrapped) == "B('size')"


def test_evaluate_non_containers_pass_through(ctx):
    array = np.zeros(3)
    assert evaluate(array, ctx) is array
    assert evaluate('text', ctx) == 'text'


def test_contains_expressions():
    assert not contains_expressions([1, 'a', (2.0, None), {'k': [3]}, {4}, np.zeros(2)])
    assert contains_expressions(B.images)
    assert contains_expressions([1, (2, {'k': V('x')})])
    assert contains_expressions({V('x'): 1})
    assert contains_expressions(frozenset({C('a')}))
    assert contains_expressions(Config({'a/b': V('x')}))


def test_copy_and_deepcopy_keep_expressions_working(ctx):
    import copy
    expr = (V('loss') + 1) * B.size
    assert copy.copy(expr).get(ctx) == 6.0
    assert copy.deepcopy(expr).get(ctx) == 6.0
    assert copy.deepcopy({'x': B.images})['x'].get(ctx).shape == (4, 3)


def test_torch_tensors_defer_to_expressions(ctx):
    torch = pytest.importorskip('torch')
    expr = torch.ones(2) * V('loss')
    assert isinstance(expr, Expression)
    assert expr.get(ctx).tolist() == [0.5, 0.5]


def test_expression_keys_in_configs(ctx):
    cfg = Config({B.size: 'four', C('device'): V('loss')})
    assert evaluate(cfg, ctx) == {4: 'four', 'cpu': 0.5}
