"""Pipeline definitions: the immutable ``Pipeline``, its frozen records, state and built-in actions."""
from . import builtins as _builtins  # registers the built-in actions
from . import metric_actions as _metric_actions  # registers gather_metrics
from . import model_actions as _model_actions  # registers init_model, train_model...
from .pipeline import Pipeline, SectionBuilder
from .records import ActionRecord, MaybeRecord
from .registry import Builtin, builtin, builtin_names, get_builtin
from .state import PipelineState

__all__ = ['ActionRecord', 'Builtin', 'MaybeRecord', 'Pipeline', 'PipelineState', 'SectionBuilder', 'builtin',
           'builtin_names', 'get_builtin']
assert __all__ == sorted(__all__)
del _builtins, _metric_actions, _model_actions
