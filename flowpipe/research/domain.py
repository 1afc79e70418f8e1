"""The space of configs a research runs: ``Alias``, ``ConfigAlias``, ``Domain`` and ``Option``.

A domain is a sum of *cubes*; a cube is a list of ``(name, values)`` options whose lists are crossed (Cartesian
product) and whose samplers draw one value per config. ``a * b`` crosses two domains, ``a + b`` chains them,
``a @ b`` pairs their values one to one, ``0.3 * d`` weights a cube for sampling among weighted cubes.
Iteration adds ``repetition`` and ``updates`` to each config and repeats the domain ``n_reps`` times
(``repeat_each`` configs at a time).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice, product
from typing import Any

import numpy as np

from .. import safe_pickle
from ..config import Config
from ..sampler import Sampler
from .domain_checks import check_count, check_disjoint, check_values, check_weight

__all__ = ['Alias', 'ConfigAlias', 'Domain', 'Option']

_ARRAYS = (list, tuple, np.ndarray)


class Alias:
    """A value with a short printable name (its ``__name__`` or ``str`` unless ``alias`` is given)."""

    def __init__(self, value: Any, alias: str | None = None):
        if isinstance(value, Alias):
            value, alias = value.value, value.alias if alias is None else alias
        self.value = value
        self.alias = alias if alias is not None else getattr(value, '__name__', None) or str(value)

    def __repr__(self) -> str:
        return f'Alias({self.alias}: {self.value})'

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Alias) and self.alias == other.alias and _same(self.value, other.value)

    def __hash__(self) -> int:
        return hash(self.alias)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.all(a == b))
    except Exception:                    # values that do not compare (arrays of other shapes)
        return a is b


class ConfigAlias:
    """An ordered list of ``(Alias key, Alias value)`` pairs: ``config()`` gives the values, ``alias()`` the names."""

    def __init__(self, config: Any = None):
        if isinstance(config, ConfigAlias):
            pairs = list(config.pairs)
        else:
            items = config.items() if isinstance(config, (dict, Config)) else (config or [])
            pairs = [(Alias(key), Alias(value)) for key, value in items]
        self.pairs: list[tuple[Alias, Alias]] = pairs

    def config(self) -> Config:
        """The config with the true values."""
        return Config({key.value: value.value for key, value in self.pairs})

    def alias(self, as_string: bool = False, delim: str = '-') -> Any:
        """The config with the values' names, or (``as_string``) ``key_value`` pairs sorted and joined by ``delim``."""
        names = {key.alias: value.alias for key, value in self.pairs}
        if as_string:
            return delim.join(f'{key}_{value}' for key, value in sorted(names.items(), key=lambda kv: str(kv[0])))
        return Config(names)

    def pop_config(self, keys: Any) -> ConfigAlias | None:
        """Remove the pairs whose key value is in ``keys``; return them (``None`` when there were none)."""
        keys = keys if isinstance(keys, (list, tuple)) else [keys]
        taken = [pair for pair in self.pairs if pair[0].value in keys]
        self.pairs = [pair for pair in self.pairs if pair[0].value not in keys]
        return ConfigAlias(taken) if taken else None

    def pop_alias(self, keys: Any) -> ConfigAlias | None:
        """Remove the pairs whose key name is in ``keys``; return them (``None`` when there were none)."""
        keys = keys if isinstance(keys, (list, tuple)) else [keys]
        taken = [pair for pair in self.pairs if pair[0].alias in keys]
        self.pairs = [pair for pair in self.pairs if pair[0].alias not in keys]
        return ConfigAlias(taken) if taken else None

    def keys(self) -> list:
        """The keys' values."""
        return [key.value for key, _ in self.pairs]

    def __getitem__(self, key: Any) -> Any:
        return self.config()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.pairs = [pair for pair in self.pairs if pair[0].value != key]
        self.pairs.append((Alias(key), Alias(value)))

    def __contains__(self, key: Any) -> bool:
        return key in self.keys()

    def __add__(self, other: ConfigAlias) -> ConfigAlias:
        result = ConfigAlias(self)
        for key, value in other.pairs:
            result[key] = value
        return result

    def __repr__(self) -> str:
        return repr(dict(self.alias()))


def _aliased_cube(options: dict) -> list:
    cube = []
    for name, values in options.items():
        if isinstance(values, _ARRAYS):
            check_values(name, values)
            values = [Alias(value) for value in values]
        elif not isinstance(values, Sampler):
            raise TypeError(f"Expected the values of option {name!r} to be a list, tuple, array or Sampler. "
                            f"Received: {type(values).__name__} {values!r}.")
        cube.append((Alias(name), values))
    return cube


def _joined(left: list, right: list, operator: str) -> list:
    check_disjoint(left, right, operator)
    return left + right


def make_domain_rng(seed: Any) -> np.random.Generator:
    """The generator a domain samples with (SFC64, as batchflow's ``make_rng``, so sampled configs match)."""
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or isinstance(seed, bool):
        return np.random.default_rng(np.random.SFC64())
    return np.random.default_rng(np.random.SFC64(seed))


class Domain:
    """A set of configs: ``Domain({'a': [1, 2]})``, ``Domain(a=[1, 2], b=NS('normal'))``, a list of cubes, or None.

    Args:
        domain: a dict of options, a ``Domain`` to copy, a list of cubes or ``None`` (one empty config).
        **kwargs: options, when ``domain`` is not given.
    """

    def __init__(self, domain: Any = None, **kwargs: Any):
        if isinstance(domain, Domain):
            self.cubes, self.weights = list(domain.cubes), domain.weights.copy()
        elif isinstance(domain, dict) or (domain is None and kwargs):
            self.cubes, self.weights = [_aliased_cube(domain or kwargs)], np.array([np.nan])
        elif isinstance(domain, list) and all(isinstance(cube, list) for cube in domain):
            self.cubes, self.weights = list(domain), np.full(len(domain), np.nan)
        elif domain is None:
            self.cubes, self.weights = [], np.array([])
        else:
            raise TypeError(f"Expected a Domain, a dict of options, a list of cubes or None. "
                            f"Received: {type(domain).__name__} {domain!r}.")
        self.updates: list[dict] = []
        self.n_updates, self.n_produced, self.values_indices = 0, 0, {}
        self.n_items, self.n_reps, self.repeat_each = None, 1, None
        self.additional, self.create_id_prefix, self.random_state = True, False, None
        self._iterator: Iterator[ConfigAlias] | None = None

    # ----- sizes -----
    @property
    def len(self) -> int | None:
        """Configs in one pass without repetitions; ``None`` when a cube has only samplers (endless)."""
        total = 0
        for cube in self.cubes:
            sizes = [len(values) for _, values in cube if isinstance(values, _ARRAYS)]
            if not sizes and cube:          # samplers only: endless
                return None
            total += int(np.prod(sizes))
        return total

    def __len__(self) -> int:
        return sum(int(np.prod([len(v) for _, v in cube if isinstance(v, _ARRAYS)], dtype=int)) for cube in self.cubes)

    @property
    def size(self) -> int | None:
        """Configs the iterator yields, repetitions included; ``None`` when endless."""
        return None if self.n_items is None else self.n_reps * self.n_items

    # ----- algebra -----
    def __add__(self, other: Domain) -> Domain:
        result = Domain()
        result.cubes, result.weights = self.cubes + other.cubes, np.concatenate([self.weights, other.weights])
        return result

    def __mul__(self, other: Any) -> Domain:
        if not isinstance(other, Domain):
            check_weight(other)
            if np.isnan(other):
                return self
            result = Domain(self)
            result.weights = np.where(np.isnan(result.weights), 1.0, result.weights) * other
            return result
        if not self.cubes or not other.cubes:
            return Domain(self if self.cubes else other)
        result = Domain()
        result.cubes = [_joined(left, right, '*') for left, right in product(self.cubes, other.cubes)]
        pairs = list(product(self.weights, other.weights))
        result.weights = np.array([np.nan if np.isnan(pair).all() else np.nanprod(pair) for pair in pairs])
        return result

    __rmul__ = __mul__

    def __matmul__(self, other: Domain) -> Domain:
        left, right = self._as_pairs(), other._as_pairs()
        if len(left.cubes) != len(right.cubes):
            raise ValueError(f"Expected domains of the same length to pair with @. Received: {len(left.cubes)} "
                             f"and {len(right.cubes)} configs.")
        result = Domain()
        result.cubes = [_joined(a, b, '@') for a, b in zip(left.cubes, right.cubes)]
        stacked = np.stack([left.weights, right.weights])
        result.weights = np.where(np.isnan(stacked).all(axis=0), np.nan, np.nanprod(stacked, axis=0))
        return result

    def _as_pairs(self) -> Domain:
        """The domain as one cube per config (each option with one value), as ``@`` needs."""
        if len(self.cubes) == 1 and len(self.cubes[0]) == 1 and isinstance(self.cubes[0][0][1], _ARRAYS):
            name, values = self.cubes[0][0]
            result = Domain()
            result.cubes = [[(name, [value])] for value in values]
            result.weights = np.full(len(values), self.weights[0])
            return result
        if all(isinstance(v, _ARRAYS) and len(v) == 1 for cube in self.cubes for _, v in cube):
            return Domain(self)
        raise ValueError("Expected a domain of one list option, or one made by @, on each side of @. "
                         f"Received: {self!r}.")

    def __getitem__(self, index: int) -> Domain:
        result = Domain()
        result.cubes, result.weights = [self.cubes[index]], self.weights[[index]]
        return result

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Domain) and self.cubes == other.cubes

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        cubes = ' + '.join(' * '.join(f'{name.alias}: ' + (f"[{', '.join(v.alias for v in values)}]"
                                                          if isinstance(values, _ARRAYS) else repr(values))
                                      for name, values in cube) for cube in self.cubes)
        return f'Domain({cubes or "{}"}; n_items={self.n_items}, n_reps={self.n_reps}, repeat_each={self.repeat_each})'

    # ----- iteration -----
    def set_iter_params(self, n_items: int | None = None, n_reps: int = 1, repeat_each: int | None = None,
                        produced: int = 0, additional: bool = True, create_id_prefix: Any = False,
                        seed: Any = None) -> None:
        """Set how the iterator runs: ``n_items`` configs per pass (default: the domain's size), ``n_reps`` passes,
        ``repeat_each`` configs repeated at a time, the sampling ``seed``; ``additional`` adds ``repetition`` and
        ``updates`` to each config, ``create_id_prefix`` adds value codes for experiment ids."""
        self.n_items = check_count('n_items', n_items, none=True) or self.len
        self.n_reps = check_count('n_reps', n_reps)
        self.repeat_each = check_count('repeat_each', repeat_each, none=True) or \
            (self.n_items if self.n_items is not None else 100)
        self.n_produced, self.additional, self.create_id_prefix = produced, additional, create_id_prefix
        self.random_state = make_domain_rng(seed)
        for cube in self.cubes:
            for _, values in cube:
                if isinstance(values, Sampler):
                    values.state = make_domain_rng(self.random_state)
        self._iterator = None

    def reset_iter(self) -> None:
        """Start the iteration over (samplers reseeded from the domain's generator)."""
        self.set_iter_params(self.n_items, self.n_reps, self.repeat_each, self.n_produced, self.additional,
                             self.create_id_prefix, self.random_state)

    @property
    def iterator(self) -> Iterator[ConfigAlias]:
        """The configs, as ``ConfigAlias`` objects."""
        if self._iterator is None:
            if self.random_state is None:
                self.reset_iter()
            self._iterator = self._with_repetitions()
        return self._iterator

    def __next__(self) -> ConfigAlias:
        return next(self.iterator)

    def _with_repetitions(self) -> Iterator[ConfigAlias]:
        samples, produced = self._samples(), 0
        while self.n_items is None or produced < self.n_items:
            chunk = list(islice(samples, int(self.repeat_each)))
            if not chunk:
                return
            for repetition in range(self.n_reps):
                for sample in chunk:
                    yield self._finish(sample, repetition)
            produced += self.repeat_each

    def _finish(self, sample: ConfigAlias, repetition: int) -> ConfigAlias:
        result = ConfigAlias(sample)
        if self.additional:
            result = result + ConfigAlias([('repetition', repetition), ('updates', self.n_updates)])
        if self.create_id_prefix:
            digits = int(self.create_id_prefix)
            codes = [result.alias().get('#' + name, 'null') for name in self._option_names()]
            result['_prefix'] = ''.join(f'{code}_' for code in codes) + f'{repetition:0{digits}d}_'
        return result

    def _option_names(self) -> list[str]:
        names: list[str] = []
        for cube in self.cubes:
            names += [name.alias for name, _ in cube if name.alias not in names and name.alias != 'repetition']
        return names

    def _samples(self) -> Iterator[ConfigAlias]:
        """Endless passes over the cubes: a block of weighted cubes is sampled by weight, unweighted ones in order."""
        nan = np.isnan(self.weights)
        blocks, start = [], 0
        for index in range(1, len(self.cubes) + 1):
            if index == len(self.cubes) or nan[index] or nan[index - 1]:
                blocks.append(list(range(start, index)))
                start = index
        if not self.cubes:
            while True:
                yield ConfigAlias()
        while True:
            for block in blocks:
                weights = np.where(np.isnan(self.weights[block]), 1.0, self.weights[block])
                iterators = [self._cube(self.cubes[i]) for i in block]
                while iterators:
                    chosen = self.random_state.choice(len(iterators), p=weights / weights.sum())
                    try:
                        yield next(iterators[chosen])
                    except StopIteration:
                        del iterators[chosen]
                        weights = np.delete(weights, chosen)

    def _cube(self, cube: list) -> Iterator[ConfigAlias]:
        arrays = [(name, values) for name, values in cube if isinstance(values, _ARRAYS)]
        samplers = [(name, values) for name, values in cube if isinstance(values, Sampler)]
        if not cube:                        # no options: one empty config
            yield ConfigAlias()
            return
        if not arrays:
            while True:
                yield sum((self._sampled(name, sampler) for name, sampler in samplers), ConfigAlias())
        for combination in product(*[[self._listed(name, value) for value in values] for name, values in arrays]):
            sampled = [self._sampled(name, sampler) for name, sampler in samplers]
            yield sum([*sampled, *combination], ConfigAlias())

    def _listed(self, name: Alias, value: Alias) -> ConfigAlias:
        pairs = [(name, value)]
        if self.create_id_prefix:
            codes = self.values_indices.setdefault(name.alias, {})
            code = codes.setdefault(value.alias, len(codes))
            pairs.append((Alias('#' + name.alias), Alias(f'{code:0{int(self.create_id_prefix)}d}')))
        return ConfigAlias(pairs)

    def _sampled(self, name: Alias, sampler: Sampler) -> ConfigAlias:
        pairs = [(name, Alias(sampler.sample(1)[0, 0]))]
        if self.create_id_prefix:
            code = self.values_indices[name.alias] = self.values_indices.get(name.alias, -1) + 1
            pairs.append((Alias('#' + name.alias), Alias(f'{code:0{int(self.create_id_prefix)}d}')))
        return ConfigAlias(pairs)

    # ----- updates -----
    def set_update(self, function: Callable, when: Any, **kwargs: Any) -> None:
        """Replace the domain with ``function(**kwargs)`` when ``when`` matches the number of configs produced;
        ``n_items``, ``n_reps``, ``repeat_each`` in ``kwargs`` set the new domain's iteration."""
        iteration = {key: kwargs.pop(key, getattr(self, key)) for key in ('n_items', 'n_reps', 'repeat_each')}
        self.updates.append({'function': function, 'when': when if isinstance(when, list) else [when],
                             'kwargs': kwargs, 'iter_kwargs': iteration})

    def update(self, generated: int, research: Any) -> Domain | None:
        """The new domain when an update is due after ``generated`` configs, else ``None``."""
        from .named import eval_expr
        from .when import must_execute
        for update in self.updates:
            if must_execute(generated - 1, update['when'], self.n_produced + (self.size or 0)):
                domain = update['function'](**eval_expr(update['kwargs'], research=research))
                if domain is None:
                    return None
                domain = Domain(domain)
                domain.updates, domain.n_updates = self.updates, self.n_updates + 1
                domain.values_indices = self.values_indices
                domain.set_iter_params(produced=generated, additional=self.additional, seed=self.random_state,
                                       create_id_prefix=self.create_id_prefix, **update['iter_kwargs'])
                return domain
        return None


class Option(Domain):
    """``Option(name, values)`` is ``Domain({name: values})``."""

    def __init__(self, name: Any, values: Any):
        super().__init__({name: values})


safe_pickle.allow(Alias, ConfigAlias)      # a research's records hold configs of them
