"""``ResearchResults``: what the experiments recorded, as rows (plain dicts) or a pandas table.

Results live in memory (``dump_results=False``) or in the research's folder, one record per finished experiment
(``experiments/<id>/record.dill``, written atomically), read again at each access. ``rows()`` works without pandas;
``df`` / ``to_df()`` need it (the ``pandas`` extra: ``pip install flowpipe[pandas]``).
"""
from __future__ import annotations

import glob
import os
from typing import Any

from .. import safe_pickle
from ..errors import UnsafeFileError
from .domain import ConfigAlias

__all__ = ['ResearchResults', 'load_records']

AUXILIARY = ('repetition', 'device', 'updates')
_KNOWN = ('record.dill', 'config.dill', 'experiment.log', 'error.txt')


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as error:
        raise ImportError("Expected pandas for a research's table (results.df / to_df). Received: pandas is not "
                          "installed. Install the extra: pip install 'flowpipe[pandas]', or use "
                          "results.rows() for plain dicts.") from error
    return pandas


#: how to open a research's record that names other code
TRUST = ("trusted=True (ResearchResults(name, trusted=True), Research.load(name, trusted=True), or "
         "Research(..., trusted=True) to run again under the name)")


def load_records(name: str, trusted: bool = False) -> dict[str, dict]:
    """The records of the experiments written under the research folder ``name`` (``{id: record}``), read safely
    (``flowpipe.safe_pickle``: values, arrays, tensors and configs) unless ``trusted``."""
    records = {}
    for path in sorted(glob.glob(os.path.join(name, 'experiments', '*', 'record.dill'))):
        with open(path, 'rb') as file:
            try:
                record = safe_pickle.load(file, trusted)
            except UnsafeFileError as error:
                raise safe_pickle.unsafe(error, path, "a research's record", TRUST) from None
        records[record['id']] = record
    return records


class ResearchResults:
    """The results of a research: ``results[id][name][iteration]`` and ``configs[id]`` (``ConfigAlias``).

    Args:
        name: the research's folder (read when ``dump_results``).
        dump_results: whether results are read from the folder.
        trusted: read the records with dill, which runs any code they name (results of the user's own classes);
            by default they are read safely and such a record is refused (``flowpipe.safe_pickle``).
        **kwargs: default filters for ``to_df`` (``config=``, ``alias=``, ``domain=``, ``name=``, ...).
    """

    def __init__(self, name: str, dump_results: bool = True, *, trusted: bool = False, **kwargs: Any):
        self.name, self.dump_results, self.kwargs, self.trusted = name, dump_results, kwargs, trusted
        self.results: dict[str, dict] = {}
        self.configs: dict[str, ConfigAlias] = {}
        self.artifacts: dict[str, list] = {}
        if dump_results:
            self.load()

    def put(self, experiment_id: str, results: dict, config: ConfigAlias) -> None:
        """Add one experiment's results (kept in memory)."""
        self.results[experiment_id], self.configs[experiment_id] = results, config

    def load(self, **kwargs: Any) -> None:
        """Read the records (and the artifacts' paths) under the research's folder."""
        if not self.dump_results:
            return
        records = {key: record for key, record in load_records(self.name, self.trusted).items()
                   if not record.get('exception')}
        self.results = {key: record['results'] for key, record in records.items()}
        self.configs = {key: record['config'] for key, record in records.items()}
        self.artifacts = {}
        for key in records:
            folder = os.path.join(self.name, 'experiments', key)
            for path in sorted(glob.glob(os.path.join(folder, '*'))):
                if os.path.basename(path) not in _KNOWN:
                    self.artifacts.setdefault(key, []).append(
                        {'artifact_name': os.path.basename(path), 'full_path': path,
                         'relative_path': os.path.join('experiments', key, os.path.basename(path))})

    # ----- filters -----
    def filter_ids_by_configs(self, config: dict | None = None, alias: dict | None = None, domain: Any = None,
                              **kwargs: Any) -> list[str]:
        """The ids whose config contains ``config`` (values), ``alias`` (printed values) or one of ``domain``'s."""
        if sum(item is not None for item in (config, alias, domain)) > 1:
            raise ValueError("Expected at most one of config=, alias=, domain=. Received several.")
        if domain is not None:
            domain.reset_iter()
            ids: list[str] = []
            for sample in domain.iterator:
                ids += [key for key in self.filter_ids_by_configs(config=dict(sample.config())) if key not in ids]
            return ids
        if kwargs:
            if alias is not None:
                alias = {**alias, **kwargs}
            else:
                config = {**(config or {}), **kwargs}
        if config is None and alias is None:
            return list(self.configs)
        wanted, use_alias = (alias, True) if alias is not None else (config, False)
        return [key for key, value in self.configs.items()
                if _contains(value.alias() if use_alias else value.config(), wanted)]

    def _ids(self, experiment_id: Any = None, config: Any = None, alias: Any = None, domain: Any = None,
             **kwargs: Any) -> list[str]:
        ids = self.filter_ids_by_configs(config, alias, domain, **kwargs)
        if experiment_id is not None:
            wanted = set(experiment_id if isinstance(experiment_id, (list, tuple)) else [experiment_id])
            ids = [key for key in ids if key in wanted]
        return ids

    # ----- rows and tables -----
    def config_row(self, experiment_id: str, use_alias: bool = True, concat_config: bool = False,
                   remove_auxilary: bool = True, drop_columns: bool = True) -> dict:
        """One experiment's config as a row: ``id`` and its values (or their names with ``use_alias``)."""
        config = ConfigAlias(self.configs[experiment_id])
        popped = config.pop_config(list(AUXILIARY)) if (remove_auxilary or concat_config) else None
        row: dict[str, Any] = {'id': experiment_id}
        if concat_config:
            row['config'] = config.alias(as_string=True)
            if not remove_auxilary and popped is not None:
                row.update(popped.alias() if use_alias else popped.config())
        if not concat_config or not drop_columns:
            row.update(dict(config.alias() if use_alias else config.config()))
        return row

    def rows(self, pivot: bool = True, include_config: bool = True, use_alias: bool = True,
             concat_config: bool = False, remove_auxilary: bool = True, drop_columns: bool = True,
             name: Any = None, iterations: Any = None, **filters: Any) -> list[dict]:
        """The table as a list of dicts: one row per experiment and iteration (``pivot``: one column per result
        name), or per experiment, name and iteration (``pivot=False``: ``name`` and ``value`` columns)."""
        self.load()
        filters = {**self.kwargs, **filters}
        name = filters.pop('name', name)
        iterations = filters.pop('iterations', iterations)
        names = None if name is None else set(name if isinstance(name, (list, tuple)) else [name])
        wanted = None if iterations is None else set(iterations if isinstance(iterations, (list, tuple))
                                                     else [iterations])
        table = []
        for key in self._ids(**filters):
            if key not in self.results:
                continue
            head = self.config_row(key, use_alias, concat_config, remove_auxilary, drop_columns) \
                if include_config else {'id': key}
            series = {label: values for label, values in self.results[key].items()
                      if names is None or label in names}
            steps = sorted({step for values in series.values() for step in values
                            if wanted is None or step in wanted})
            for step in steps:
                if pivot:
                    row = {**head, 'iteration': step}
                    row.update({label: values[step] for label, values in series.items() if step in values})
                    table.append(row)
                else:
                    table += [{**head, 'iteration': step, 'name': label, 'value': values[step]}
                              for label, values in series.items() if step in values]
        return table

    def to_df(self, pivot: bool = True, include_config: bool = True, use_alias: bool = True,
              concat_config: bool = False, remove_auxilary: bool = True, drop_columns: bool = True,
              **kwargs: Any) -> Any:
        """The table as a pandas ``DataFrame`` (see ``rows``); filters: ``experiment_id``, ``name``,
        ``iterations``, ``config``, ``alias``, ``domain`` or config values as keywords."""
        pandas = _pandas()
        return pandas.DataFrame(self.rows(pivot, include_config, use_alias, concat_config, remove_auxilary,
                                          drop_columns, **kwargs))

    @property
    def df(self) -> Any:
        """``to_df()`` with the defaults."""
        return self.to_df()

    def artifacts_to_df(self, include_config: bool = True, use_alias: bool = False, concat_config: bool = False,
                        remove_auxilary: bool = True, drop_columns: bool = True, name: Any = None,
                        **filters: Any) -> Any:
        """A table of the files the experiments left in their folders (``name``: only those names)."""
        if not self.dump_results:
            raise ValueError("Expected a research run with dump_results=True for artifacts. Received: results kept "
                             "in memory only.")
        pandas = _pandas()
        self.load()
        names = None if name is None else set(name if isinstance(name, (list, tuple)) else [name])
        table = []
        for key in self._ids(**filters):
            head = self.config_row(key, use_alias, concat_config, remove_auxilary, drop_columns) \
                if include_config else {'id': key}
            table += [{**head, **item} for item in self.artifacts.get(key, [])
                      if names is None or item['artifact_name'] in names]
        return pandas.DataFrame(table)

    def __len__(self) -> int:
        self.load()
        return len(self.results)

    def __repr__(self) -> str:
        return f'ResearchResults({self.name!r}, {len(self.results)} experiments)'


def _contains(config: Any, wanted: dict) -> bool:
    for key, value in wanted.items():
        if key not in config:
            return False
        try:
            if not bool(config[key] == value):
                return False
        except Exception:
            return False
    return True
