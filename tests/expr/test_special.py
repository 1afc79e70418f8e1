"""F, R, I, W, P and PerItem."""
import warnings

import numpy as np
import pytest

from flowpipe.expr import PP, B, C, Context, F, I, P, PerItem, R, V, W


def add(x, y=0):
    return x + y


def test_func_with_arguments(ctx):
    assert F(add, V('loss'), y=B.size).get(ctx) == 4.5
    assert F(add)(V('loss'), 1).get(ctx) == 1.5
    assert F(lambda: 7).get(ctx) == 7


def test_func_result_can_be_called_again(ctx):
    make = F(lambda: add)
    assert make()(1, 2).get(ctx) == 3


def test_func_rejects_non_callables():
    with pytest.raises(TypeError, match='Received: func=3'):
        F(3)


def test_func_repr():
    assert repr(F(add)(B.size, y=1)) == "F(add)(B('size'), y=1)"


def test_random_uses_the_batch_generator(ctx):
    first = R('uniform', 0, 1, size=3).get(ctx)
    ctx_again = Context(batch=ctx.batch, seed=np.random.SeedSequence(7))
    assert np.allclose(first, R('uniform', 0, 1, size=3).get(ctx_again))
    assert R('choice', ['a', 'b']).get(ctx) in ('a', 'b')
    assert R('normal', size=B.size).get(ctx).shape == (4,)


def test_random_rejects_unknown_methods():
    with pytest.raises(ValueError, match=r"Received: method='unifrom'.*'uniform'"):
        R('unifrom')


def test_random_with_a_callable_gets_the_batch_generator_as_rng(ctx):
    def color(low, rng, size=None):
        return rng.integers(low, 256, size=size)
    first = R(color, 100).get(ctx)
    again = R(color, 100).get(Context(batch=ctx.batch, seed=np.random.SeedSequence(7)))
    assert first == again and 100 <= first < 256
    assert R(lambda: 'drawn').get(ctx) == 'drawn'


def test_per_item_random_with_a_callable(ctx):
    sizes = []

    def sized(rng, size=None):
        sizes.append(size)
        return rng.uniform(size=size)
    assert len(P(R(sized, size=2)).get(ctx)) == 4 and sizes == [(4, 2)]
    colors = P(R(lambda rng: tuple(rng.integers(0, 256, 3)))).get(ctx)   # no size: one call per item
    assert len(colors) == 4 and all(len(color) == 3 for color in colors)
    assert len(set(colors)) > 1


def test_random_callable_repr_and_bad_method():
    def pick(rng):
        return rng.random()
    assert repr(R(pick, 1, k=2)) == 'R(test_random_callable_repr_and_bad_method.<locals>.pick, 1, k=2)'
    with pytest.raises(ValueError, match='or a callable. Received: method=3'):
        R(3)


def test_iteration(ctx):
    assert I('c').get(ctx) == 2
    assert I('current').get(ctx) == 2
    assert I('m').get(ctx) == 10
    assert I('r').get(ctx) == pytest.approx(0.3)
    ctx.iteration = 9
    assert I('ratio').get(ctx) == 1.0


def test_iteration_ratio_needs_a_total(ctx):
    ctx.total = None
    assert I('m').get(ctx) is None
    with pytest.raises(ValueError, match=r"I\('r'\).*total=None"):
        I('r').get(ctx)


def test_iteration_kind_is_validated():
    with pytest.raises(ValueError, match="Received: 'x'"):
        I('x')


def test_wrap_returns_the_expression(ctx):
    inner = V('loss') * 2
    assert W(inner).get(ctx) is inner


def test_per_item_splits_sequences(ctx):
    values = P(B.labels).get(ctx)
    assert isinstance(values, PerItem) and list(values) == [0, 1, 0, 1]
    rows = P(B.images).get(ctx)
    assert len(rows) == 4 and list(rows[1]) == [3.0, 4.0, 5.0]


def test_per_item_repeats_scalars(ctx):
    assert P(C('device')).get(ctx) == ['cpu'] * 4
    assert P(V('loss')).get(ctx) == [0.5] * 4


def test_per_item_random_draws_one_value_per_item(ctx):
    values = P(R('uniform', 0, 1)).get(ctx)
    assert len(values) == 4 and len(set(values)) == 4
    vectors = P(R('normal', size=3)).get(ctx)
    assert len(vectors) == 4 and vectors[0].shape == (3,)
    choices = P(R('choice', [5, 6])).get(ctx)
    assert len(choices) == 4 and set(choices) <= {5, 6}


def test_per_item_rejects_wrong_length(ctx):
    with pytest.raises(ValueError, match=r"one value per batch item \(4\).*length 3"):
        P(V('triple', default=[1, 2, 3])).get(ctx)


def test_per_item_uses_len_without_size(ctx):
    ctx.batch = [10, 20]
    assert P(R('uniform')).get(ctx).__len__() == 2


def test_per_item_repr():
    assert repr(P(R('uniform', 0, 1))) == "P(R('uniform', 0, 1))"
    assert repr(PerItem([1])) == 'PerItem([1])'


# batchflow's forms


def test_random_from_a_list_a_function_and_a_seed(ctx):
    assert R(['a', 'b'], p=[0, 1]).get(ctx) == 'b'
    assert set(P(R(['x', 'y'])).get(ctx)) <= {'x', 'y'}

    def colors(size=1, rng=None):
        return rng.integers(0, 255, size=(size, 3))
    drawn = P(R(colors)).get(Context(batch=ctx.batch, seed=ctx.seed))
    assert len(drawn) == 4 and drawn[0].shape == (3,)
    again = Context(batch=ctx.batch, seed=ctx.seed)
    assert np.array_equal(np.stack(drawn), np.stack(P(R(colors)).get(again)))
    assert R(lambda size=None: np.zeros(size), size=2).get(ctx).shape == (2,)
    seeded = R('uniform', seed=5)
    assert seeded.get(ctx) == seeded.get(Context(batch=ctx.batch, seed=ctx.seed))
    assert repr(seeded) == "R('uniform', seed=5)"
    with pytest.raises(ValueError, match='a list to choose from'):
        R(3)


def test_iteration_kinds_by_prefix_and_attribute(ctx):
    assert I('cur').get(ctx) == I.current.get(ctx) == 2
    assert I('total').get(ctx) == I('max').get(ctx) == I.maximum.get(ctx) == 10
    with pytest.raises(ValueError, match="Received: ''"):
        I('')


def test_pp_evaluates_once_per_item(ctx):
    calls = []
    values = PP(F(lambda: calls.append(1) or len(calls))).get(ctx)
    assert list(values) == [1, 2, 3, 4] and repr(PP(V('x'))) == "PP(V('x'))"
    draws = PP(R('normal', 0, 1)).get(ctx)
    assert len(set(draws)) == 4


# rows per item on a rank's shard of a global batch


def _shard_context(ctx, start, stop, total=4):
    """``ctx``'s batch cut to items ``start:stop`` of its global batch of ``total``, as a rank holds it."""
    from flowpipe.data.shards import Shard
    images = ctx.batch.images[start:stop]
    index = type(ctx.batch)(shard=Shard(start, stop, total, said=set()))
    batch = type(ctx.batch)(images=images, labels=ctx.batch.labels[start:stop], size=stop - start, index=index)
    return Context(batch=batch, config=ctx.config, seed=np.random.SeedSequence(7))


@pytest.mark.parametrize('size', [B.images.shape, (B.size, 2), B.size])
def test_random_rows_sized_by_the_batch_are_the_global_batchs_rows_on_a_shard(ctx, size):
    whole = R('normal', 0, 1, size=size).get(Context(batch=ctx.batch, seed=np.random.SeedSequence(7)))
    parts = [R('normal', 0, 1, size=size).get(_shard_context(ctx, start, stop)) for start, stop in ((0, 3), (3, 4))]
    assert np.array_equal(np.concatenate(parts), whole)
    empty = R('normal', 0, 1, size=size).get(_shard_context(ctx, 4, 4))
    assert empty.shape == (0, *np.shape(whole)[1:])


def test_random_draws_of_constant_size_are_the_same_on_a_shard_without_a_word(ctx, recwarn):
    whole = R('normal', size=3).get(Context(batch=ctx.batch, seed=np.random.SeedSequence(7)))
    assert np.array_equal(R('normal', size=3).get(_shard_context(ctx, 0, 3)), whole)
    assert np.array_equal(R('uniform', C('model/lr'), 2).get(_shard_context(ctx, 0, 3)),
                          R('uniform', 0.1, 2).get(Context(batch=ctx.batch, seed=np.random.SeedSequence(7))))
    assert not [w for w in recwarn if 'flowpipe: R(' in str(w.message)]


def test_a_draw_read_from_the_shard_but_not_per_item_is_said_once_per_run(ctx):
    shard = _shard_context(ctx, 0, 3)
    doubled = R('uniform', size=B.size * 2)
    with pytest.warns(UserWarning, match=r"R\('uniform', size=B\('size'\) \* 2\) reads the batch.*size=6 on a "
                                         r"shard of 3.*depend on the number of ranks"):
        assert doubled.get(shard).shape == (6,)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        doubled.get(shard)                      # said once for the run's shards
        R('normal', B.images).get(Context(batch=ctx.batch, seed=np.random.SeedSequence(7)))   # one process
    with pytest.warns(UserWarning, match=r"R\('normal', B\('images'\)\) reads the batch"):
        R('normal', B.images).get(shard)
