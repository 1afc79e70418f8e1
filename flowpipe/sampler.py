"""Samplers: random distributions of points that combine into new ones (batchflow's sampler algebra).

``sampler.sample(size)`` returns an array of shape ``(size, dim)``. Leaves draw from numpy (``NumpySampler``),
``scipy.stats`` (``ScipySampler``, needs scipy), a histogram (``HistoSampler``) or a constant
(``ConstantSampler``); ``dim=k`` stacks ``k`` independent copies. They combine:

- ``a + b``, ``a * 2``, ``(1, 1) - a``... (any arithmetic): the operation on the samples (numbers and arrays
  broadcast over points);
- ``a & b``: coordinates of ``a`` then of ``b``; ``0.3 & a``: ``a`` with weight 0.3 in a mixture;
- ``a | b``: a mixture, each point from ``a`` or ``b`` with probability proportional to their weights;
- ``a.apply(func)``: ``func`` of the samples; ``a.truncate(high, low, expr)``: only points with
  ``low <= expr(point) <= high`` (or ``expr(point)`` true), drawn until there are enough.

Randomness comes from each leaf's generator (``seed=``, see ``flowpipe.make_rng``); mixtures draw from the
generator of their first leaf, so a sampler whose leaves have seeds gives the same points every time it is made.
"""
from __future__ import annotations

import operator
import warnings
from typing import Any, Callable

import numpy as np

from .data.sampling import make_rng

__all__ = ['ConstantSampler', 'HistoSampler', 'NumpySampler', 'Sampler', 'ScipySampler']

_NUMPY = {'n': 'normal', 'u': 'uniform', 'mvn': 'multivariate_normal', 'e': 'exponential', 'g': 'gamma',
          'be': 'beta', 'mnm': 'multinomial', 'f': 'f', 'p': 'poisson', 'w': 'weibull', 'ln': 'lognormal',
          'b': 'binomial', 'chi2': 'chisquare', 'c': 'choice'}
_SCIPY = {'n': 'norm', 'u': 'uniform', 'mvn': 'multivariate_normal', 'e': 'expon', 'g': 'gamma', 'be': 'beta',
          'mnm': 'multinomial', 'f': 'f', 'p': 'poisson', 'w': 'dweibull', 'ln': 'lognorm', 'b': 'binom',
          'chi2': 'chi2'}
_OPERATORS = {'add': operator.add, 'sub': operator.sub, 'mul': operator.mul, 'truediv': operator.truediv,
              'floordiv': operator.floordiv, 'mod': operator.mod, 'pow': operator.pow}


class Sampler:
    """The algebra every sampler shares (see the module docstring); subclasses implement ``_draw(size)``."""
    __array_priority__ = 100     # numpy arrays defer to the sampler's reflected operators
    weight = 1.0

    def __init__(self, dim: int = 1):
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"Expected dim to be a positive int. Received: dim={dim!r}")
        self.dim = dim

    def sample(self, size: int) -> np.ndarray:
        """``size`` points, an array of shape ``(size, dimension)``."""
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"Expected size to be an int >= 0. Received: size={size!r}")
        parts = [_as_points(self._draw(int(size)), size) for _ in range(self.dim)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)

    def _draw(self, size: int) -> np.ndarray:
        raise NotImplementedError

    def _rng(self) -> Any:
        return make_rng(None)

    def __or__(self, other: Sampler) -> Sampler:
        return _Mixture(self, _sampler(other))

    def __and__(self, other: Any) -> Sampler:
        if isinstance(other, (int, float, np.number)) and not isinstance(other, bool):
            return _Weighted(self, self.weight * float(other))
        return _Stacked(self, _sampler(other))

    __rand__ = __and__

    def apply(self, transform: Callable[[np.ndarray], np.ndarray]) -> Sampler:
        """A sampler of ``transform(points)``."""
        return _Applied(self, transform)

    def truncate(self, high: Any = None, low: Any = None, expr: Callable | None = None, prob: float = 0.5,
                 max_iters: int | None = None, sample_anyways: bool = False) -> Sampler:
        """A sampler of the points with ``low <= expr(points) <= high`` (``expr`` the identity by default), or with
        ``expr(points)`` true when neither bound is given. ``prob`` is a guess of the share that passes; after
        ``max_iters`` rounds (10 000 by default) the draw raises, or, with ``sample_anyways``, warns and draws the
        missing points without truncation."""
        return _Truncated(self, high, low, expr, prob, max_iters, sample_anyways)


def _binary(name: str, reflected: bool) -> Callable:
    func = _OPERATORS[name]

    def method(self: Sampler, other: Any) -> Sampler:
        return _Operation(func, other, self) if reflected else _Operation(func, self, other)
    return method


for _name in _OPERATORS:
    setattr(Sampler, f'__{_name}__', _binary(_name, False))
    setattr(Sampler, f'__r{_name}__', _binary(_name, True))


def _sampler(other: Any) -> Sampler:
    if not isinstance(other, Sampler):
        raise TypeError(f"Expected a Sampler to combine with. Received: {other!r}; wrap a value in "
                        "ConstantSampler(value)")
    return other


def _as_points(values: Any, size: int) -> np.ndarray:
    values = np.asarray(values)
    return values.reshape(size, -1) if values.ndim != 2 else values


def _points(value: Any, size: int) -> Any:
    return value.sample(size) if isinstance(value, Sampler) else np.asarray(value)


class _Composite(Sampler):
    def __init__(self, *bases: Sampler):
        super().__init__()
        self.bases = bases

    def _rng(self) -> Any:
        return self.bases[0]._rng()


class _Operation(_Composite):
    def __init__(self, func: Callable, left: Any, right: Any):
        super().__init__(*(side for side in (left, right) if isinstance(side, Sampler)))
        self.func, self.left, self.right = func, left, right

    def _draw(self, size: int) -> np.ndarray:
        return self.func(_points(self.left, size), _points(self.right, size))


class _Stacked(_Composite):
    def _draw(self, size: int) -> np.ndarray:
        return np.concatenate([base.sample(size) for base in self.bases], axis=1)


class _Weighted(_Composite):
    def __init__(self, base: Sampler, weight: float):
        super().__init__(base)
        self.weight = weight

    def _draw(self, size: int) -> np.ndarray:
        return self.bases[0].sample(size)


class _Mixture(_Composite):
    def __init__(self, left: Sampler, right: Sampler):
        super().__init__(left, right)
        self.weight = left.weight + right.weight

    def _draw(self, size: int) -> np.ndarray:
        left, right = self.bases
        rng = self._rng()
        n_left = int(rng.binomial(size, left.weight / self.weight))
        points = np.concatenate([left.sample(n_left), right.sample(size - n_left)])
        return points[rng.permutation(size)]


class _Applied(_Composite):
    def __init__(self, base: Sampler, transform: Callable):
        super().__init__(base)
        self.transform = transform

    def _draw(self, size: int) -> np.ndarray:
        return self.transform(self.bases[0].sample(size))


class _Truncated(_Composite):
    def __init__(self, base: Sampler, high: Any, low: Any, expr: Callable | None, prob: float,
                 max_iters: int | None, sample_anyways: bool):
        super().__init__(base)
        if high is None and low is None and expr is None:
            raise ValueError("Expected high, low or expr to truncate by. Received: none of them")
        self.high, self.low, self.expr, self.prob = high, low, expr, prob
        self.max_iters, self.sample_anyways = int(max_iters or 10_000), sample_anyways

    def _keep(self, points: np.ndarray) -> np.ndarray:
        values = (self.expr(points) if self.expr is not None else points).reshape(len(points), -1)
        if self.high is None and self.low is None:
            return values.astype(bool).all(axis=1)
        keep = np.ones(len(points), dtype=bool)
        if self.low is not None:
            keep &= (values >= np.asarray(self.low)).all(axis=1)
        if self.high is not None:
            keep &= (values <= np.asarray(self.high)).all(axis=1)
        return keep

    def _draw(self, size: int) -> np.ndarray:
        chunk = int(size / self.prob + 2 * np.sqrt(size * (1 - self.prob)) / self.prob) + 1
        kept, count = [], 0
        for _ in range(self.max_iters):
            if count >= size:
                break
            points = self.bases[0].sample(chunk)
            points = points[self._keep(points)]
            kept.append(points)
            count += len(points)
        else:
            if count < size:
                text = (f"Expected the truncation to keep {size} points within max_iters={self.max_iters} rounds. "
                        f"Received {count}")
                if not self.sample_anyways:
                    raise ValueError(f"{text}; widen the bounds or raise max_iters")
                warnings.warn(f"{text}; the other {size - count} are drawn without truncation "
                              "(sample_anyways=True)", UserWarning, stacklevel=3)
                kept.append(self.bases[0].sample(size - count))
        points = np.concatenate(kept) if kept else self.bases[0].sample(0)
        return points[:size]


class NumpySampler(Sampler):
    """A numpy distribution: ``name`` a ``numpy.random.Generator`` method or an alias (``'n'`` normal, ``'u'``
    uniform, ``'mvn'``, ``'e'``, ``'g'``, ``'be'``, ``'p'``, ``'b'``...); ``kwargs`` are its parameters."""

    def __init__(self, name: str, seed: Any = None, dim: int = 1, **kwargs: Any):
        super().__init__(dim)
        self.name = _NUMPY.get(name, name)
        if not callable(getattr(np.random.Generator, self.name, None)):
            raise ValueError(f"Expected a numpy.random.Generator method or one of {sorted(_NUMPY)}. Received: "
                             f"name={name!r}")
        self.params, self.state = kwargs, make_rng(seed)

    def _rng(self) -> Any:
        return self.state

    def _draw(self, size: int) -> np.ndarray:
        return getattr(self.state, self.name)(size=size, **self.params)


class ScipySampler(Sampler):
    """A ``scipy.stats`` distribution: ``name`` its name or an alias (``'n'``, ``'u'``, ``'mvn'``...)."""

    def __init__(self, name: str, seed: Any = None, dim: int = 1, **kwargs: Any):
        super().__init__(dim)
        try:
            import scipy.stats as stats
        except ImportError as error:
            raise ImportError("ScipySampler needs scipy: pip install scipy, or use NumpySampler") from error
        self.name = _SCIPY.get(name, name)
        if not hasattr(stats, self.name):
            raise ValueError(f"Expected a scipy.stats distribution or one of {sorted(_SCIPY)}. Received: {name!r}")
        self.distribution, self.state = getattr(stats, self.name)(**kwargs), make_rng(seed)

    def _rng(self) -> Any:
        return self.state

    def _draw(self, size: int) -> np.ndarray:
        return self.distribution.rvs(size=size, random_state=self.state)


class ConstantSampler(Sampler):
    """Always the same point ``constant``."""

    def __init__(self, constant: Any, dim: int = 1):
        super().__init__(dim)
        self.constant = np.asarray(constant).reshape(1, -1)

    def _draw(self, size: int) -> np.ndarray:
        return np.repeat(self.constant, size, axis=0)


class HistoSampler(Sampler):
    """Points drawn uniformly within histogram bins chosen by their counts.

    Args:
        histo: ``(bins, edges)`` as ``numpy.histogramdd`` returns them (counts, not densities).
        edges: instead of ``histo``, the bin edges per axis; the bins start empty and ``update(points)`` fills them.
        seed: see ``flowpipe.make_rng``.
    """

    def __init__(self, histo: Any = None, edges: Any = None, seed: Any = None):
        super().__init__()
        if histo is not None:
            self.bins, self.edges = np.asarray(histo[0], dtype=float), [np.asarray(edge) for edge in histo[1]]
        elif edges is not None:
            self.edges = [np.asarray(edge) for edge in edges]
            self.bins = np.zeros([len(edge) - 1 for edge in self.edges])
        else:
            raise ValueError("Expected histo=(bins, edges) or edges=. Received: neither")
        self.state = make_rng(seed)
        low, high = np.meshgrid(*[edge[:-1] for edge in self.edges], indexing='ij'), np.meshgrid(
            *[edge[1:] for edge in self.edges], indexing='ij')
        self._low = np.stack(low, axis=-1).reshape(-1, len(self.edges))
        self._high = np.stack(high, axis=-1).reshape(-1, len(self.edges))

    def _rng(self) -> Any:
        return self.state

    def update(self, points: np.ndarray) -> None:
        """Add ``points`` (shape ``(n, dimension)``) to the bins' counts."""
        self.bins += np.histogramdd(np.asarray(points), bins=self.edges)[0]

    def _draw(self, size: int) -> np.ndarray:
        counts = self.bins.reshape(-1)
        if counts.sum() <= 0:
            raise ValueError("Expected a histogram with counts to sample from. Received: empty bins; update() first")
        chosen = self.state.choice(len(counts), size=size, p=counts / counts.sum())
        return self.state.uniform(self._low[chosen], self._high[chosen])
