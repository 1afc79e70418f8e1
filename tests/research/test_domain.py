"""flowpipe.research.domain: sizes, algebra, repetitions, sampling, updates, aliases."""
import numpy as np
import pytest

from flowpipe.research import Alias, ConfigAlias, Domain, Option
from flowpipe.sampler import NumpySampler


def values(domain, key):
    return [config[key] for config in domain.iterator]


@pytest.mark.parametrize('op, size', [('*', 6), ('+', 5), ('@', None)])
def test_algebra_sizes(op, size):
    a, b = Domain(a=[1, 2]), Domain(b=[3, 4, 5])
    if op == '@':
        with pytest.raises(ValueError, match='same length'):
            _ = a @ b
        return
    domain = a * b if op == '*' else a + b
    domain.set_iter_params(n_reps=2)
    assert len(domain) == size and domain.size == 2 * size and len(list(domain.iterator)) == 2 * size


def test_matmul_pairs_values():
    domain = Domain(a=[1, 2]) @ Domain(b=[3, 4])
    assert [(c['a'], c['b']) for c in domain.iterator] == [(1, 3), (2, 4)]


def test_repetitions_and_repeat_each():
    domain = Domain(a=[1, 2, 3, 4])
    domain.set_iter_params(n_reps=2, repeat_each=2)
    configs = [(c['a'], c['repetition']) for c in domain.iterator]
    assert configs == [(1, 0), (2, 0), (1, 1), (2, 1), (3, 0), (4, 0), (3, 1), (4, 1)]


def test_sampled_options_are_reproducible():
    first, second = Domain(a=NumpySampler('normal')), Domain(a=NumpySampler('normal'))
    first.set_iter_params(n_items=4, seed=3)
    second.set_iter_params(n_items=4, seed=3)
    drawn = values(first, 'a')
    assert drawn == values(second, 'a') and len(set(drawn)) == 4


def test_update_replaces_domain_and_counts_updates():
    domain = Option('x', [1, 2])
    domain.set_update(lambda: Option('x', [3]), 'last')
    configs = list(domain.iterator)
    new = domain.update(len(configs), None)
    assert [c['x'] for c in new.iterator] == [3]
    assert new.n_updates == 1 and domain.update(1, None) is None


def test_aliases_name_values():
    config = ConfigAlias({'f': Alias(np.mean, 'avg'), 'k': 3})
    assert config.alias() == {'f': 'avg', 'k': '3'} and config['f'] is np.mean
    assert config.alias(as_string=True) == 'f_avg-k_3'
    assert ConfigAlias({'f': print}).alias()['f'] == 'print'


def test_bad_options_raise():
    with pytest.raises(TypeError, match='list, tuple, array or Sampler'):
        Domain(a=3)
    with pytest.raises(TypeError, match='Expected a Domain'):
        Domain(42)


def test_empty_cube_gives_one_config():
    domain = Domain([[]])
    assert len(list(domain.iterator)) == 1


@pytest.mark.parametrize('join', [lambda a, b: a * b, lambda a, b: a @ b, lambda a, b: (a * Domain(c=[5])) * b])
def test_an_option_on_both_sides_of_a_product_or_a_pairing_is_refused(join):
    with pytest.raises(ValueError, match=r"different options on each side.*\['a'\] on both sides.*'\+'"):
        join(Domain(a=[1, 2]), Domain(a=[3, 4]))
    assert [c['a'] for c in (Domain(a=[1, 2]) + Domain(a=[3])).iterator] == [1, 2, 3]    # chained: all of them


def test_an_option_without_values_is_refused():
    for empty in ([], (), np.array([])):
        with pytest.raises(ValueError, match="at least one value for option 'a'"):
            Domain(a=empty)


@pytest.mark.parametrize('weight, error, match', [
    (3, TypeError, r'the int 3, which reads as a count.*n_reps=3.*\(3.0\)'), (-0.5, ValueError, 'weight > 0'),
    (0.0, ValueError, 'weight > 0'), (float('inf'), ValueError, 'weight > 0'), ('0.3', TypeError, 'float weight')])
def test_weights_that_are_not_positive_floats_are_refused(weight, error, match):
    with pytest.raises(error, match=match):
        _ = Domain(a=[1]) * weight
    with pytest.raises(error, match=match):
        _ = weight * Domain(a=[1])
    assert list((0.3 * Domain(a=[1]) + 0.7 * Domain(a=[2])).weights) == [0.3, 0.7]


@pytest.mark.parametrize('kwargs, name', [({'n_reps': 0}, 'n_reps'), ({'n_items': 0}, 'n_items'),
                                          ({'repeat_each': -1}, 'repeat_each'), ({'n_reps': 1.5}, 'n_reps')])
def test_counts_below_one_are_refused(kwargs, name):
    with pytest.raises(ValueError, match=f'{name} as an int >= 1'):
        Domain(a=[1, 2]).set_iter_params(**kwargs)
