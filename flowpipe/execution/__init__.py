"""Running pipelines: batch source → action runner → prefetcher → progress, with ordered locks, profiling and
checkpoints (the stages are ``Node``s with ``state()``/``load_state()``)."""
from .checkpoint import Checkpoint
from .deterministic import deterministic
from .epochs import EpochClock
from .events import TrainingRun
from .locks import LockCancelled, OrderedLocks
from .nodes import Node
from .prefetch import Prefetcher
from .profile import Profiler
from .run import RunArgs, iterate, next_batch, run_pipeline
from .runner import BatchRunner, run_steps
from .steps import Plan, Step, compile_plan

__all__ = ['BatchRunner', 'Checkpoint', 'EpochClock', 'LockCancelled', 'Node', 'OrderedLocks', 'Plan', 'Prefetcher',
           'Profiler', 'RunArgs', 'Step', 'TrainingRun', 'compile_plan', 'deterministic', 'iterate', 'next_batch',
           'run_pipeline', 'run_steps']
assert __all__ == sorted(__all__)
