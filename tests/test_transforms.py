"""Normalizer and Quantizer: statistics computed or given, round trips, clipping, the integer types' edges."""
import numpy as np
import pytest

from flowpipe import Normalizer, Quantizer


@pytest.fixture
def values():
    return np.random.default_rng(3).normal(5, 2, size=500).astype('float32')


@pytest.mark.parametrize('mode, expected', [
    ('mean', lambda x: x - x.mean()),
    ('std', lambda x: x / x.std()),
    ('meanstd', lambda x: (x - x.mean()) / x.std()),
    ('min', lambda x: x - x.min()),
    ('minmax', lambda x: (x - x.min()) / (x.max() - x.min())),
])
def test_modes_and_round_trip(values, mode, expected):
    normalizer = Normalizer(mode)
    result, stats = normalizer.normalize(values, return_stats=True)
    np.testing.assert_allclose(result, expected(values), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(normalizer.denormalize(result, normalization_stats=stats), values, atol=1e-4)
    assert not np.shares_memory(result, values)


def test_inplace_changes_the_array(values):
    copy = values.copy()
    result = Normalizer('mean').normalize(values, inplace=True)
    assert result is values and np.allclose(values, copy - copy.mean())


def test_clipping_to_quantiles_keeps_the_quantiles(values):
    normalizer = Normalizer('minmax', clip_to_quantiles=True, q=(0.1, 0.9))
    result, stats = normalizer.normalize(values, return_stats=True)
    low, high = np.quantile(values, (0.1, 0.9))
    assert np.allclose(stats['quantiles'], (low, high))
    assert np.isclose(result.min(), 0, atol=1e-6) and np.isclose(result.max(), 1)
    np.testing.assert_allclose(normalizer.denormalize(result, stats), np.clip(values, low, high), atol=1e-4)


def test_given_statistics_win(values):
    normalizer = Normalizer('meanstd', normalization_stats={'mean': 1.0, 'std': 4.0})
    np.testing.assert_allclose(normalizer(values), (values - 1) / 4, rtol=1e-6)
    np.testing.assert_allclose(normalizer.normalize(values, {'mean': 0.0, 'std': 2.0}), values / 2, rtol=1e-6)
    np.testing.assert_allclose(normalizer.denormalize(normalizer(values)), values, rtol=1e-5)


def test_constant_array_and_nans():
    assert np.array_equal(Normalizer('minmax').normalize(np.full(4, 3.0)), np.zeros(4))
    with_nan = np.array([1.0, np.nan, 3.0])
    assert np.allclose(Normalizer('mean', expect_nan=True).normalize(with_nan), [-1, np.nan, 1], equal_nan=True)


def test_callable_mode_needs_its_inverse(values):
    normalizer = Normalizer(lambda array, stats: array * 2)
    doubled = normalizer.normalize(values)
    assert np.allclose(doubled, values * 2)
    with pytest.raises(ValueError, match='inverse'):
        normalizer.denormalize(doubled, {})
    assert np.allclose(normalizer.denormalize(doubled, {}, mode=lambda array, stats: array / 2), values)


def test_normalizer_errors(values):
    with pytest.raises(ValueError, match="Expected mode"):
        Normalizer('median')
    with pytest.raises(ValueError, match="'std'"):
        Normalizer('meanstd').normalize(values, normalization_stats={'mean': 0})
    with pytest.raises(ValueError, match='return_stats=True'):
        Normalizer('mean').denormalize(values)


@pytest.mark.parametrize('dtype', [np.int8, np.int16, np.uint8, np.uint16])
def test_quantizer_round_trip_within_half_a_bin(values, dtype):
    quantizer = Quantizer((values.min(), values.max()), dtype=dtype)
    quantized = quantizer.quantize(values, copy=True)
    assert quantized.dtype == dtype
    restored = quantizer.dequantize(quantized)
    assert restored.dtype == np.float32
    assert np.abs(restored - values).max() <= quantizer.estimated_absolute_error / 2 * 1.01
    assert quantizer.compute_mean_error(values) < 0.01


@pytest.mark.parametrize('clip', [False, True])
def test_quantizer_out_of_range(clip):
    quantizer = Quantizer((-1.0, 1.0), clip=clip, dtype=np.uint8)
    quantized = quantizer.quantize(np.array([-5.0, 0.0, 5.0]), copy=True)
    assert quantized.tolist() == [1 if clip else 0, 128, 255]
    ends = quantizer.dequantize(quantized)[[0, 2]]
    assert np.allclose(ends, [-1.0, 1.0], atol=quantizer.estimated_absolute_error / 2 * 1.01)


def test_quantizer_centering_and_errors():
    quantizer = Quantizer((-1.0, 1.0), center=True, mean=10.0)
    assert abs(quantizer.dequantize(quantizer.quantize(np.array([10.5]), copy=True))[0] - 10.5) < 0.01
    with pytest.raises(TypeError, match='np.int8'):
        Quantizer((0, 1), dtype=np.int32)
    with pytest.raises(ValueError, match='low < high'):
        Quantizer((1, 0))
    with pytest.raises(ValueError, match='mean='):
        Quantizer((0, 1), center=True)
