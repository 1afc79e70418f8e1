"""flowpipe.progress: the run's progress bar (tqdm, notebook-aware) and the monitors shown on it."""
from .bar import NullProgress, Progress, in_notebook, make_progress
from .monitors import Monitor, format_value

__all__ = ['Monitor', 'NullProgress', 'Progress', 'format_value', 'in_notebook', 'make_progress']
