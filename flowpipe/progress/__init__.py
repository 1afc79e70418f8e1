"""flowpipe.progress: the run's progress bar (tqdm, notebook-aware), the monitors shown on it, batchflow's
``Notifier`` and the resource monitors (CPU, memory, GPU)."""
from .bar import NullProgress, Progress, in_notebook, make_progress
from .monitors import Monitor, format_value
from .notifier import Notifier, notifier
from .resources import RESOURCES, CPUMonitor, MemoryMonitor, ResourceMonitor, read_resource

__all__ = ['CPUMonitor', 'MemoryMonitor', 'Monitor', 'Notifier', 'NullProgress', 'Progress', 'RESOURCES',
           'ResourceMonitor', 'format_value', 'in_notebook', 'make_progress', 'notifier', 'read_resource']
assert __all__ == sorted(__all__)
