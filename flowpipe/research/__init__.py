"""flowpipe.research: one experiment over a grid of configs — batchflow's ``Research`` on flowpipe.

``Research`` (the run), ``Domain`` / ``Option`` / ``Alias`` / ``ConfigAlias`` (the configs), ``Experiment`` and
``Executor`` (what each config runs), the expressions ``E``, ``EC``, ``O``, ``S``, ``EP``, ``R``,
``ResearchResults`` (the table), ``ExperimentTimeout`` (a task past ``run(timeout=...)``), ``ProcessPool`` (the
default executor of experiments), ``run_task`` (what a worker runs for one task) and ``get_metrics`` (batchflow's
unit that evaluates the metrics a pipeline gathered). See docs/research.md.
"""
from .domain import Alias, ConfigAlias, Domain, Option
from .executor import Executor
from .experiment import Experiment
from .helpers import get_metrics
from .jobs import Task, run_task
from .named import E, EC, EP, O, R, S
from .pool import ProcessPool, WorkerDied
from .research import Research
from .results import ResearchResults
from .scheduler import ExperimentTimeout

__all__ = ['Alias', 'ConfigAlias', 'Domain', 'E', 'EC', 'EP', 'Executor', 'Experiment', 'ExperimentTimeout', 'O',
           'Option',
           'ProcessPool', 'R', 'Research', 'ResearchResults', 'S', 'Task', 'WorkerDied', 'get_metrics', 'run_task']
assert __all__ == sorted(__all__)
