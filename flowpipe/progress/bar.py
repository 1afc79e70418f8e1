"""Progress bars for runs: ``make_progress(bar, total, variables)`` turns every accepted ``bar=`` form into a
``Progress``.

Accepted forms of ``bar``:

- ``False`` / ``None``: no bar (a ``Progress`` whose methods do nothing);
- ``True`` / ``'a'``: a notebook bar inside a notebook kernel with ipywidgets installed, a text bar otherwise;
- ``'t'``: a text bar (tqdm); ``'n'``: a notebook bar, falling back to text without a kernel or ipywidgets;
- a dict ``{'bar': <one of the above>, 'monitors': [...], 'desc': ...}``; other keys go to tqdm (``file``,
  ``ncols``, ``leave``, ``mininterval``...);
- a tqdm-like object (has ``update`` and ``close``) or class (called with ``total=`` and ``desc=``);
- batchflow's ``Notifier`` (``flowpipe.progress.notifier``), which shows its own monitors.

Monitors (see ``flowpipe.progress.monitors``) show the last value of chosen variables; the bar also shows
``ready=k``, how many batches wait in the prefetch queue: ``ready=0`` all along means the run is input-bound.
Only the caller's thread refreshes the bar (tqdm's own monitor thread is off).
"""
from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

import tqdm as tqdm_module

from .monitors import Monitor, format_value, make_monitors

__all__ = ['NullProgress', 'Progress', 'in_notebook', 'make_progress']

BAR_KINDS = (True, False, None, 'a', 't', 'n')


class _TextBar(tqdm_module.tqdm):
    # tqdm's monitor thread would refresh the bar from another thread.
    monitor_interval = 0


class NullProgress:
    """The no-bar ``Progress``: same methods, does nothing."""

    n = 0
    total = None
    bar = None

    def update(self, n: int = 1, ready: int | None = None) -> None:
        """Do nothing."""

    def write(self, message: str) -> None:
        """Print ``message``."""
        print(message)

    def close(self) -> None:
        """Do nothing."""

    def __enter__(self) -> NullProgress:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class Progress(NullProgress):
    """A tqdm(-like) bar plus monitors.

    Args:
        bar: the tqdm-like object to drive.
        monitors: what to show in the bar's postfix.
        variables: where the monitored variables live (the pipeline's variables).
        owned: whether ``close()`` closes ``bar``.
    """

    def __init__(self, bar: Any, monitors: list[Monitor] = (), variables: Mapping[str, Any] | None = None,
                 owned: bool = True):
        self.bar = bar
        self.monitors = list(monitors)
        self.variables = variables if variables is not None else {}
        self.owned = owned
        self.n = 0
        self._closed = False

    @property
    def total(self) -> int | None:
        """The number of steps the bar expects, ``None`` when open-ended."""
        return getattr(self.bar, 'total', None)

    def update(self, n: int = 1, ready: int | None = None) -> None:
        """Advance by ``n`` batches; ``ready`` is how many finished batches wait in the prefetch queue."""
        postfix = {monitor.label: format_value(monitor.read(self.variables)) for monitor in self.monitors}
        if ready is not None:
            postfix['ready'] = str(ready)
        if postfix and hasattr(self.bar, 'set_postfix'):
            self.bar.set_postfix(postfix, refresh=False)
        self.n += n
        self.bar.update(n)

    def write(self, message: str) -> None:
        """Print ``message`` above the bar without breaking it."""
        writer = getattr(self.bar, 'write', None)
        (writer if callable(writer) else print)(message)

    def close(self) -> None:
        """Close the bar (if this object made it). Idempotent."""
        if not self._closed:
            self._closed = True
            if self.owned:
                self.bar.close()

    def __repr__(self) -> str:
        return f"Progress({self.n}/{self.total}, monitors={[m.label for m in self.monitors]})"


def in_notebook() -> bool:
    """Whether the code runs in a Jupyter kernel that can show widget bars."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    in_kernel = shell is not None and 'IPKernelApp' in getattr(shell, 'config', {})
    return in_kernel and importlib.util.find_spec('ipywidgets') is not None


def _bar_class(kind: Any) -> type:
    if kind in ('n', 'a', True) and in_notebook():
        from tqdm.notebook import tqdm as notebook_tqdm

        return type('_NotebookBar', (notebook_tqdm,), {'monitor_interval': 0})
    return _TextBar


def make_progress(bar: Any, total: int | None, variables: Mapping[str, Any] | None = None) -> NullProgress:
    """Build the progress bar of a run.

    Args:
        bar: any form listed in the module docstring.
        total: number of batches in the run, ``None`` when open-ended.
        variables: the pipeline's variables, read by monitors.

    Raises:
        ValueError: an unknown bar kind. TypeError: ``bar`` or a monitor of an unsupported type.
    """
    if callable(getattr(bar, 'for_run', None)):
        return bar.for_run(total, variables if variables is not None else {})
    options: dict[str, Any] = {}
    if isinstance(bar, Mapping):
        options = dict(bar)
        bar = options.pop('bar', True)
    monitors = make_monitors(options.pop('monitors', None))
    if bar is False or bar is None:
        return NullProgress()
    if _is_tqdm_like(bar):
        if 'desc' in options and callable(getattr(bar, 'set_description', None)):
            bar.set_description(options['desc'])
        return Progress(bar, monitors, variables)
    if isinstance(bar, type):
        return Progress(bar(total=total, **options), monitors, variables)
    if not isinstance(bar, (bool, str)) or (isinstance(bar, str) and bar not in BAR_KINDS):
        raise _bad_bar(bar)
    return Progress(_bar_class(bar)(total=total, **options), monitors, variables)


def _is_tqdm_like(bar: Any) -> bool:
    methods = (getattr(bar, 'update', None), getattr(bar, 'close', None))
    return not isinstance(bar, type) and all(callable(method) for method in methods)


def _bad_bar(bar: Any) -> Exception:
    kinds = "True, False, None, 'a', 't', 'n', a dict with a 'bar' key, or a tqdm-like object"
    error_class = ValueError if isinstance(bar, str) else TypeError
    return error_class(f"Expected bar to be one of {kinds}. Received: bar={bar!r}.")
