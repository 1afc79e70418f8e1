"""Transformations of value ranges: ``Normalizer`` (shift and scale by statistics, and back) and ``Quantizer``
(floats to small integers over a fixed range, and back), batchflow's two helpers of the same names.

``Normalizer(mode)`` computes its statistics from the array it normalizes, unless it is given them
(``normalization_stats=`` on the instance or per call); ``normalize(..., return_stats=True)`` hands them back so
that ``denormalize`` can undo the change. ``Quantizer(ranges, dtype)`` splits ``ranges`` into as many equal bins as
the integer type has values less one; a quantized value is the index of its bin, offset by the type's minimum.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ['Normalizer', 'Quantizer']

MODES = ('mean', 'std', 'meanstd', 'min', 'minmax')
# the statistics each named mode needs
MODE_STATS = {'mean': ('mean',), 'std': ('std',), 'meanstd': ('mean', 'std'), 'min': ('min',),
              'minmax': ('min', 'max')}
QUANTIZED_DTYPES = (np.int8, np.int16, np.uint8, np.uint16)


def _check_mode(mode: Any) -> None:
    if not callable(mode) and mode not in MODES:
        raise ValueError(f"Expected mode as one of {MODES} or a callable f(array, stats). Received: mode={mode!r}.")


def _statistic(name: str, array: np.ndarray, nan: bool) -> float:
    function = {'mean': np.mean, 'std': np.std, 'min': np.min, 'max': np.max}[name]
    if nan:
        function = {'mean': np.nanmean, 'std': np.nanstd, 'min': np.nanmin, 'max': np.nanmax}[name]
    return function(array)


def _scale(value: float) -> float:
    """A divisor: a zero spread (a constant array) divides by one instead of making infinities."""
    return value if value != 0 else 1


class Normalizer:
    """Normalize arrays by their statistics and undo it.

    Args:
        mode: ``'mean'`` subtracts the mean, ``'std'`` divides by the standard deviation, ``'meanstd'`` both,
            ``'min'`` subtracts the minimum, ``'minmax'`` maps ``[min, max]`` onto ``[0, 1]``; or a callable
            ``f(array, stats) -> array``.
        clip_to_quantiles: clip the array to its quantiles ``q`` first (kept as ``stats['quantiles']``); with
            ``'minmax'`` the quantiles are the range.
        q: the quantiles to clip to.
        normalization_stats: the statistics to use (``{'mean': ..., 'std': ..., 'min': ..., 'max': ...,
            'quantiles': (low, high)}``) instead of computing them from each array.
        expect_nan: compute statistics ignoring NaNs (slower).
    """

    def __init__(self, mode: str | Callable = 'meanstd', clip_to_quantiles: bool = False,
                 q: Sequence[float] = (0.01, 0.99), normalization_stats: Mapping | None = None,
                 expect_nan: bool = False) -> None:
        _check_mode(mode)
        self.mode, self.clip_to_quantiles, self.q = mode, clip_to_quantiles, tuple(q)
        self.normalization_stats = None if normalization_stats is None else dict(normalization_stats)
        self.expect_nan = expect_nan

    def reset_stats(self, normalization_stats: Mapping | None = None) -> None:
        """Replace the instance's statistics (``None``: compute them from each array again)."""
        self.normalization_stats = None if normalization_stats is None else dict(normalization_stats)

    def compute_stats(self, array: np.ndarray, mode: str | Callable | None = None,
                      clip_to_quantiles: bool | None = None) -> dict:
        """The statistics ``normalize`` would compute from ``array`` (quantiles first, the rest after clipping)."""
        mode = self.mode if mode is None else mode
        clip = self.clip_to_quantiles if clip_to_quantiles is None else clip_to_quantiles
        stats: dict = {}
        if clip:
            quantile = np.nanquantile if self.expect_nan else np.quantile
            stats['quantiles'] = tuple(quantile(array, self.q))
            array = np.clip(array, *stats['quantiles'])
        for name in MODE_STATS.get(mode, ()) if isinstance(mode, str) else ():
            stats[name] = _statistic(name, array, self.expect_nan)
        return stats

    def normalize(self, array: np.ndarray, normalization_stats: Mapping | None = None,
                  mode: str | Callable | None = None, return_stats: bool = False, inplace: bool = False,
                  clip_to_quantiles: bool | None = None) -> np.ndarray | tuple[np.ndarray, dict]:
        """Normalize ``array`` (a float array); with ``return_stats=True`` also return the statistics used.

        Statistics come from ``normalization_stats``, else the instance's, else ``array`` itself. ``inplace``
        changes ``array`` itself instead of a copy.
        """
        mode = self.mode if mode is None else mode
        _check_mode(mode)
        clip = self.clip_to_quantiles if clip_to_quantiles is None else clip_to_quantiles
        stats = normalization_stats if normalization_stats is not None else self.normalization_stats
        stats = self.compute_stats(array, mode, clip) if stats is None else dict(stats)
        array = array if inplace else np.array(array, copy=True)
        if clip:
            np.clip(array, *self._need(stats, 'quantiles', 'clip_to_quantiles=True'), out=array)
        if callable(mode):
            array[...] = mode(array, stats)
        else:
            low, spread = self._shift_scale(stats, mode, clip)
            array -= low
            array /= _scale(spread)
        return (array, stats) if return_stats else array

    __call__ = normalize

    def denormalize(self, array: np.ndarray, normalization_stats: Mapping | None = None,
                    mode: str | Callable | None = None, inplace: bool = False) -> np.ndarray:
        """Undo ``normalize`` with the statistics it used (``normalization_stats``, else the instance's).

        Values clipped to quantiles stay clipped. A callable mode cannot be inverted: pass the inverse as ``mode``.
        """
        if mode is None and callable(self.mode):
            raise ValueError("Expected mode=f(array, stats), the inverse of the normalizing callable. Received: "
                             "mode=None with a callable normalization. Pass the denormalizing function as mode.")
        mode = self.mode if mode is None else mode
        _check_mode(mode)
        stats = normalization_stats if normalization_stats is not None else self.normalization_stats
        if stats is None:
            raise ValueError("Expected the statistics normalize() used. Received: normalization_stats=None and none "
                             "on the normalizer. Call normalize(array, return_stats=True) and pass them here.")
        array = array if inplace else np.array(array, copy=True)
        if callable(mode):
            array[...] = mode(array, stats)
        else:
            low, spread = self._shift_scale(stats, mode, self.clip_to_quantiles)
            array *= _scale(spread)
            array += low
        return array

    @classmethod
    def _shift_scale(cls, stats: Mapping, mode: str, clip: bool) -> tuple[float, float]:
        """What a named mode subtracts and then divides by."""
        if mode == 'minmax':
            if clip and 'quantiles' in stats:
                low, high = stats['quantiles']
            else:
                low, high = cls._need(stats, 'min', mode), cls._need(stats, 'max', mode)
            return low, high - low
        low = cls._need(stats, 'mean', mode) if 'mean' in mode else 0
        low = cls._need(stats, 'min', mode) if mode == 'min' else low
        return low, cls._need(stats, 'std', mode) if 'std' in mode else 1

    @staticmethod
    def _need(stats: Mapping, name: str, why: str) -> Any:
        if name not in stats:
            raise ValueError(f"Expected normalization_stats with {name!r} for {why}. Received: keys "
                             f"{sorted(stats)!r}. Add it, or leave the statistics to be computed from the array.")
        return stats[name]


class Quantizer:
    """Quantize floats within ``ranges`` to a small integer type and back (lossy: within one bin's width).

    Args:
        ranges: ``(low, high)``, the values the bins cover.
        clip: clip values to ``ranges`` first: values outside then land in the first/last bin (``min + 1`` and
            ``max`` of the type). Without it, values below ``low`` become the type's minimum.
        center: subtract ``mean`` before quantizing (and add it back after dequantizing).
        mean: the value ``center`` subtracts.
        dtype: ``np.int8``, ``np.int16``, ``np.uint8`` or ``np.uint16``.
    """

    def __init__(self, ranges: Sequence[float], clip: bool = True, center: bool = False, mean: float | None = None,
                 dtype: Any = np.int8) -> None:
        if dtype not in QUANTIZED_DTYPES:
            raise TypeError(f"Expected dtype as one of np.int8, np.int16, np.uint8, np.uint16. Received: "
                            f"dtype={dtype!r}. Pick one of those.")
        if len(ranges) != 2 or not ranges[0] < ranges[1]:
            raise ValueError(f"Expected ranges as (low, high) with low < high. Received: ranges={tuple(ranges)!r}.")
        if center and mean is None:
            raise ValueError("Expected mean= with center=True. Received: mean=None. Pass the value to subtract.")
        self.ranges, self.clip, self.center, self.mean, self.dtype = tuple(ranges), clip, center, mean, dtype
        info = np.iinfo(dtype)
        n_bins = int(info.max) - int(info.min) - 1
        # the edges in the precision of ``ranges`` (float32 ranges give float32 steps), then as float32
        self.bins = np.histogram_bin_edges([], bins=n_bins, range=self.ranges).astype(np.float32)
        # what each quantized value (minus the type's minimum) comes back as: below the range, every bin's middle,
        # at or above the range's end
        middles = (self.bins[:-1].astype(np.float64) + self.bins[1:]) / 2
        self._levels = np.concatenate([self.bins[:1], middles, self.bins[-1:]])

    def quantize(self, array: np.ndarray, copy: bool = False) -> np.ndarray:
        """The bin of every value, offset by the type's minimum, as ``dtype``. ``copy`` keeps ``array`` unchanged
        (without it, centering and clipping happen in place)."""
        array = np.array(array, copy=True) if copy else np.asarray(array)
        if self.center:
            array -= self.mean
        if self.clip:
            np.clip(array, *self.ranges, out=array)
        indices = np.digitize(array, self.bins, right=False)
        return (indices + int(np.iinfo(self.dtype).min)).astype(self.dtype)

    __call__ = quantize

    def dequantize(self, array: np.ndarray, copy: bool = False) -> np.ndarray:
        """The middle of every value's bin (the range's ends for values at or beyond them), as float32.

        batchflow returns the bin's upper edge; the middle halves the error. ``copy`` is accepted for batchflow's
        signature: the input is never changed.
        """
        del copy
        indices = np.asarray(array).astype(np.int64) - int(np.iinfo(self.dtype).min)
        values = self._levels[np.clip(indices, 0, len(self._levels) - 1)]
        if self.center:
            values = values + self.mean
        return values.astype(np.float32)

    def compute_mean_error(self, data: np.ndarray) -> float:
        """The mean absolute error of a quantize/dequantize round trip on ``data``, relative to its spread."""
        restored = self.dequantize(self.quantize(data, copy=True))
        return float(np.mean(np.abs(restored - data)) / _scale(float(np.std(data))))

    @property
    def estimated_absolute_error(self) -> float:
        """The widest bin: no value within ``ranges`` comes back further than this."""
        return float(np.diff(self.bins).max())
