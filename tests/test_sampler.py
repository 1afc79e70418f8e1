"""Samplers and their algebra."""
import pickle

import numpy as np
import pytest

from flowpipe import ConstantSampler, HistoSampler, NumpySampler as NS, ScipySampler


def test_leaves_shapes_dims_and_seeds():
    assert NS('n', dim=2).sample(5).shape == (5, 2)
    assert NS('u').sample(3).shape == (3, 1)
    assert np.array_equal(NS('n', seed=3).sample(4), NS('n', seed=3).sample(4))
    mvn = NS('mvn', mean=[0, 0], cov=[[1, 0], [0, 1]], seed=1).sample(7)
    assert mvn.shape == (7, 2)
    assert ConstantSampler([1, 2]).sample(3).tolist() == [[1, 2]] * 3
    with pytest.raises(ValueError, match="name='nope'"):
        NS('nope')
    with pytest.raises(ValueError, match='size'):
        NS('n').sample(-1)


def test_arithmetic_stacking_apply():
    u = NS('u', seed=0)
    shifted = (2 * u + (1, 5)).sample(4)
    assert shifted.shape == (4, 2) and (shifted[:, 0] >= 1).all() and (shifted[:, 1] >= 5).all()
    assert (NS('u', seed=0) - NS('u', seed=0)).sample(3).tolist() == [[0.0]] * 3
    assert (u & ConstantSampler(7)).sample(2)[:, 1].tolist() == [7, 7]
    assert ((u * 10).apply(np.floor).sample(20) % 1 == 0).all()
    assert (1 / (u + 1)).sample(5).max() <= 1


def test_mixture_follows_weights():
    mixture = 0.9 & ConstantSampler(0) | 0.1 & ConstantSampler(1)
    ones = mixture.sample(2000).mean()
    assert 0.05 < ones < 0.15
    assert ((ConstantSampler(0) | ConstantSampler(1)).sample(4000).mean() - 0.5) < 0.05


def test_truncation():
    ring = NS('n', dim=2, seed=2).truncate(1.5, 0.5, expr=lambda m: np.sqrt((m ** 2).sum(axis=1)))
    radius = np.sqrt((ring.sample(500) ** 2).sum(axis=1))
    assert radius.min() >= 0.5 and radius.max() <= 1.5
    boxed = NS('n', seed=1).truncate(high=[0.1], low=[-0.1])
    assert np.abs(boxed.sample(50)).max() <= 0.1
    with pytest.raises(ValueError, match='max_iters=2'):
        NS('u').truncate(low=5, max_iters=2).sample(3)
    with pytest.raises(ValueError, match='high, low or expr'):
        NS('u').truncate()


def test_truncation_that_keeps_too_few_points_samples_anyway_when_asked():
    lenient = NS('u', seed=0).truncate(low=0.9, prob=0.9, max_iters=1, sample_anyways=True)
    with pytest.warns(UserWarning, match='max_iters=1'):
        points = lenient.sample(40)
    assert points.shape == (40, 1) and 0 < (points >= 0.9).sum() < 40


def test_histo_sampler():
    histo = np.histogramdd(NS('n', dim=2, seed=0).sample(1000), bins=4)
    points = HistoSampler(histo, seed=0).sample(300)
    assert points.shape == (300, 2)
    assert all(points[:, axis].min() >= histo[1][axis][0] for axis in range(2))
    empty = HistoSampler(edges=2 * [np.linspace(-1, 1, 5)])
    with pytest.raises(ValueError, match='update'):
        empty.sample(1)
    empty.update(np.array([[0.1, 0.1], [0.2, 0.3]]))
    assert empty.bins.sum() == 2 and (empty.sample(10) >= 0).all()


def test_scipy_and_pickling():
    pytest.importorskip('scipy')
    both = NS('n', seed=1) & ScipySampler('u', seed=2)
    assert both.sample(3).shape == (3, 2)
    restored = pickle.loads(pickle.dumps(both))
    assert np.array_equal(restored.sample(3), both.sample(3))
    assert ScipySampler('mvn', mean=[0, 0], cov=[[2, 1], [1, 2]]).sample(5).shape == (5, 2)
