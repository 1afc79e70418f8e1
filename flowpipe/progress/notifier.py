"""batchflow's ``Notifier``: a progress bar with monitored values, kept as history and plotted on demand.

A ``Notifier`` wraps an iterable (``for x in Notifier('t')(items)``), is updated by hand (``update``/``close``,
or ``with``), or is given to a run (``pipeline.run(..., notifier=Notifier('t', monitors='loss'))``, the same as
``bar=``). Monitors are resources (``'cpu'``, ``'memory'``... see ``flowpipe.progress.resources``), pipeline
variables by name, named expressions, lists (their last item), or dicts ``{'source': ..., 'name': ...}``; their
values show on the bar and are kept, one per update, for ``plot()``. ``graphs`` are kept and plotted but not shown
on the bar; flowpipe draws them when ``plot()`` is called (batchflow also redraws them live in notebooks).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .bar import NullProgress, make_progress
from .monitors import Monitor, format_value
from .resources import RESOURCES, read_resource

__all__ = ['Notifier', 'notifier']


class _Tracked:
    """One monitored source; ``read`` takes a value, ``get`` (for the bar's ``Monitor``) repeats the last one."""

    def __init__(self, spec: Any):
        if isinstance(spec, Mapping):
            spec = dict(spec)
            self.source, self.name = spec.pop('source'), spec.pop('name', None)
        else:
            self.source, self.name = spec, None
        if self.name is None:
            self.name = self.source if isinstance(self.source, str) else getattr(self.source, 'name', None) or \
                f'monitor {id(self.source):x}'
        self.history: list[Any] = []

    def read(self, variables: Mapping) -> Any:
        source = self.source
        if isinstance(source, str) and source in RESOURCES:
            value = read_resource(source, key=self)
        elif isinstance(source, str):
            value = variables.get(source)
        elif callable(getattr(source, 'get', None)) and not isinstance(source, Mapping):
            from ..expr.context import Context
            try:
                value = source.get(Context(variables=variables))
            except KeyError:
                value = None
        else:
            value = source
        if isinstance(value, list):
            value = value[-1] if value else None
        self.history.append(value)
        return value

    def get(self, ctx: Any) -> Any:
        return self.history[-1] if self.history else None


class Notifier:
    """A progress bar (``bar``: ``'t'`` text, ``'n'`` notebook, ``'a'``/``True`` automatic, ``None``/``False`` none)
    that tracks ``monitors`` (shown) and ``graphs`` (kept); ``log_file`` gets one line per update.

    Other keywords (``desc``, ``total``, tqdm's ``file``, ``ncols``...) go to the bar.
    """

    def __init__(self, bar: Any = 'a', total: int | None = None, desc: str | None = None, monitors: Any = None,
                 graphs: Any = None, log_file: str | None = None, frequency: int = 1, **options: Any):
        self.kind, self.total, self.desc, self.options = bar, total, desc, options
        self.monitors = [_Tracked(spec) for spec in _as_list(monitors)]
        self.graphs = [_Tracked(spec) for spec in _as_list(graphs)]
        self.log_file, self.frequency = log_file, max(1, int(frequency))
        self.variables: Mapping = {}
        self.n = 0
        self._progress: Any = None

    def _start(self, total: int | None) -> None:
        if self._progress is not None:
            return
        shown = [Monitor(tracked, tracked.name) for tracked in self.monitors]
        if self.kind is None or self.kind is False:
            self._progress = NullProgress()
        else:
            spec = {'bar': self.kind, **({'desc': self.desc} if self.desc else {}), **self.options}
            self._progress = make_progress(spec, self.total if self.total is not None else total)
            self._progress.monitors = shown

    def for_run(self, total: int | None, variables: Mapping) -> Notifier:
        """This notifier as a run's progress bar: monitors read the run's variables."""
        self.variables = variables
        self._progress = None   # a notifier given to several runs shows a new bar for each
        self._start(total)
        return self

    def __call__(self, iterable: Iterable) -> Iterator:
        """Iterate over ``iterable``, updating after each item and closing at the end."""
        self._start(len(iterable) if hasattr(iterable, '__len__') else None)
        try:
            for item in iterable:
                yield item
                self.update()
        finally:
            self.close()

    def update(self, n: int = 1, ready: int | None = None) -> None:
        """Advance by ``n``, take the monitored values, refresh the bar, write the log line."""
        self._start(None)
        self.n += n
        if (self.n - 1) % self.frequency == 0:
            values = [(tracked.name, tracked.read(self.variables)) for tracked in self.monitors + self.graphs]
            if self.log_file is not None:
                with open(self.log_file, 'a', encoding='utf-8') as log:
                    log.write(f"{self.n}: " + ', '.join(f'{name}={format_value(value)}' for name, value in values)
                              + '\n')
        self._progress.update(n, ready=ready)

    def write(self, message: str) -> None:
        """Print ``message`` without breaking the bar."""
        self._start(None)
        self._progress.write(message)

    def close(self) -> None:
        """Close the bar (idempotent)."""
        if self._progress is not None:
            self._progress.close()

    def __enter__(self) -> Notifier:
        self._start(None)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def plot(self, path: Any = None) -> Any:
        """Draw each monitor's and graph's history (an image for 2-D values); returns the figure.

        ``path`` saves the figure to a file (in a script, where matplotlib shows nothing: a warning says so).
        """
        from .plots import finish_figure, pyplot
        plt = pyplot('plot()')
        import numpy as np
        tracked = self.monitors + self.graphs
        if not tracked:
            raise ValueError("Expected monitors or graphs to plot. Received: a Notifier that tracks nothing")
        figure, axes = plt.subplots(1, len(tracked), figsize=(6 * len(tracked), 4), squeeze=False)
        for axis, item in zip(axes[0], tracked):
            last = item.history[-1] if item.history else None
            if last is not None and np.ndim(last) == 2:
                axis.imshow(np.asarray(last))
            else:
                axis.plot([np.nan if value is None else np.mean(value) for value in item.history])
            axis.set_title(str(item.name))
        finish_figure(figure, path, 'Notifier.plot', stacklevel=2)
        return figure

    def __repr__(self) -> str:
        return f"Notifier(bar={self.kind!r}, n={self.n}, monitors={[m.name for m in self.monitors]})"


def notifier(iterable: Iterable, bar: Any = 'a', **kwargs: Any) -> Iterator:
    """Iterate over ``iterable`` with a ``Notifier(bar, **kwargs)``."""
    return Notifier(bar, **kwargs)(iterable)


def _as_list(spec: Any) -> list:
    if spec is None:
        return []
    if isinstance(spec, (str, Mapping)) or not isinstance(spec, (list, tuple)):
        return [spec]
    # a list of values to monitor (a container) versus a list of monitors: containers are lists of non-monitors
    return list(spec)
