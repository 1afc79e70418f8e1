"""The root objects B C V D F R I W P M."""
import pickle

import dill
import pytest

from flowpipe.expr import PP, B, C, D, F, I, L, M, P, R, V, W, evaluate
from flowpipe.expr.named import BatchExpr


def test_roots_are_instances_that_build_expressions():
    assert isinstance(B.images, BatchExpr) and isinstance(B('images'), BatchExpr)
    assert repr(B) == 'B'


def test_batch_config_and_dataset_roots_stand_for_the_whole(ctx):
    assert evaluate(B, ctx) is ctx.batch
    assert evaluate(C, ctx) is ctx.config
    assert evaluate(D, ctx) is ctx.dataset


@pytest.mark.parametrize('root', [V, M, F, R, I, W, P])
def test_other_roots_need_arguments(ctx, root):
    with pytest.raises(TypeError, match=f'Received: {root!r} itself'):
        root.get(ctx)


def test_attribute_access_only_on_named_roots():
    with pytest.raises(AttributeError, match=r'F\.something'):
        F.something


@pytest.mark.parametrize('root', [B, C, D, F, I, L, M, P, PP, R, V, W])
def test_roots_pickle_to_themselves(root):
    assert pickle.loads(pickle.dumps(root)) is root
    assert dill.loads(dill.dumps(root)) is root


def test_expressions_pickle_with_dill(ctx):
    expr = F(lambda x: x * 2)(V('loss') + B.size) - I('c')
    restored = dill.loads(dill.dumps(expr))
    assert repr(restored) == repr(expr)
    assert restored.get(ctx) == expr.get(ctx) == 7.0
    for simple in (B.images[0], V('x', mode='a', default=[]), C('a/b'), R('uniform', 0, 1, size=P(3)), W(B), M('m')):
        assert repr(dill.loads(dill.dumps(simple))) == repr(simple)


@pytest.mark.parametrize('root', [P, PP, B])
def test_roots_are_named_by_their_letter_as_batchflow_s_classes(root, request):
    assert root.__name__ == repr(root) and type(root).__name__ == 'Root'
    assert request.node.callspec.id == repr(root)        # pytest names parameters by it, as batchflow's classes
