"""Resource readings (CPU, memory, GPU) and batchflow's sampling monitors built on them.

``read_resource(name)`` gives one reading: ``'cpu'`` (this process's CPU use since the previous reading, in % of
one core), ``'memory'``/``'rss'`` (resident memory, MB), ``'uss'`` (unique memory, MB: needs psutil),
``'gpu_memory'`` (MB torch holds on the current CUDA device) and ``'gpu'`` (utilisation %: needs pynvml).
``ResourceMonitor`` (batchflow's ``Monitor``) samples some of them in a background thread while a ``with``
block runs; ``plot()`` draws what it saw.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from typing import Any, Sequence

__all__ = ['CPUMonitor', 'MemoryMonitor', 'RESOURCES', 'ResourceMonitor', 'read_resource']

RESOURCES = ('cpu', 'memory', 'rss', 'uss', 'gpu', 'gpu_memory')


class _Reader:
    """Whoever calls ``read_resource('cpu')`` without a ``key`` of its own."""


_ANYONE = _Reader()
# The previous CPU reading of each caller, dropped with the caller (a weak key: a new caller never inherits it).
_CPU_LAST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cpu(key: object) -> float:
    """Process CPU use (all threads) since the previous reading under ``key``, in % of one core."""
    now, used = time.perf_counter(), time.process_time()
    last = _CPU_LAST.get(key)
    _CPU_LAST[key] = (now, used)
    if last is None or now <= last[0]:
        return 0.0
    return 100.0 * (used - last[1]) / (now - last[0])


def _rss() -> float:
    try:
        with open('/proc/self/statm', encoding='ascii') as statm:
            return int(statm.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2 ** 20
    except (OSError, ValueError, AttributeError):
        import resource  # peak, not current, where /proc is missing
        scale = 1 if sys.platform == 'darwin' else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2 ** 20


def _optional(module: str, resource: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        raise ImportError(f"Expected {module} to read {resource!r}. Install it with `pip install "
                          f"{'nvidia-ml-py' if module == 'pynvml' else module}`, or monitor 'cpu'/'memory'") from None


def read_resource(name: str, key: object = _ANYONE) -> float:
    """One reading of the resource ``name`` (see the module docstring); ``key``, an object of the caller's
    (a monitor passes itself), separates the ``'cpu'`` readings of different callers."""
    if name == 'cpu':
        return _cpu(key)
    if name in ('memory', 'rss'):
        return _rss()
    if name == 'uss':
        return _optional('psutil', name).Process().memory_full_info().uss / 2 ** 20
    if name == 'gpu_memory':
        import torch
        return torch.cuda.memory_allocated() / 2 ** 20 if torch.cuda.is_available() else 0.0
    if name == 'gpu':
        pynvml = _optional('pynvml', name)
        pynvml.nvmlInit()
        return float(pynvml.nvmlDeviceGetUtilizationRates(pynvml.nvmlDeviceGetHandleByIndex(0)).gpu)
    raise ValueError(f"Expected a resource among {RESOURCES}. Received: {name!r}")


class ResourceMonitor:
    """Samples resources every ``frequency`` seconds in a background thread, while used as a context manager.

    Args:
        source: a resource name or a list of them (``RESOURCES``).
        frequency: seconds between samples.

    Attributes:
        data: ``{name: [values]}``; ``times``: seconds since the start, one per sample.
    """

    def __init__(self, source: str | Sequence[str] = 'cpu', frequency: float = 0.1):
        self.sources = [source] if isinstance(source, str) else list(source)
        for name in self.sources:
            if name not in RESOURCES:
                raise ValueError(f"Expected resources among {RESOURCES}. Received: {name!r}")
        if frequency <= 0:
            raise ValueError(f"Expected frequency > 0 seconds. Received: frequency={frequency!r}")
        self.frequency = frequency
        self.data: dict[str, list[float]] = {name: [] for name in self.sources}
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, start: float) -> None:
        self.times.append(time.perf_counter() - start)
        for name in self.sources:
            self.data[name].append(read_resource(name, key=self))

    def _loop(self, start: float) -> None:
        while not self._stop.wait(self.frequency):
            self._sample(start)

    def start(self) -> ResourceMonitor:
        """Start sampling (the first sample is taken at once); a monitor already sampling goes on as it is."""
        if self._thread is not None:
            return self
        start = time.perf_counter()
        self._sample(start)
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(start,), name='flowpipe-monitor', daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and wait for the thread (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> ResourceMonitor:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def plot(self, path: Any = None) -> Any:
        """Draw every resource against time (matplotlib); returns the figure; ``path`` saves it to a file."""
        from .plots import finish_figure, pyplot
        plt = pyplot('plot()')
        figure, axes = plt.subplots(1, len(self.sources), figsize=(6 * len(self.sources), 4), squeeze=False)
        for axis, name in zip(axes[0], self.sources):
            axis.plot(self.times, self.data[name])
            axis.set(title=name, xlabel='seconds')
        finish_figure(figure, path, f'{type(self).__name__}.plot', stacklevel=2)
        return figure


class CPUMonitor(ResourceMonitor):
    """Samples this process's CPU use (%)."""

    def __init__(self, frequency: float = 0.1):
        super().__init__('cpu', frequency)


class MemoryMonitor(ResourceMonitor):
    """Samples this process's resident memory (MB)."""

    def __init__(self, frequency: float = 0.1):
        super().__init__('memory', frequency)
