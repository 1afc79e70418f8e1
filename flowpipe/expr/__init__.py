"""Named expressions: placeholders evaluated while a batch is processed."""
from .assign import assign, save_data_to
from .base import MISSING, Expression, contains_expressions, evaluate
from .context import Context, Store
from .listwise import ListExpr
from .named import BatchExpr, ConfigExpr, DatasetExpr, ModelExpr, NamedExpr, VariableExpr
from .refs import references
from .roots import B, C, D, F, I, L, M, P, PP, R, Root, V, W
from .special import FuncExpr, IterationExpr, PerItem, PerItemExpr, RandomExpr, WrapExpr

__all__ = ['B', 'BatchExpr', 'C', 'ConfigExpr', 'Context', 'D', 'DatasetExpr', 'Expression', 'F', 'FuncExpr', 'I',
           'IterationExpr', 'L', 'ListExpr', 'M', 'MISSING', 'ModelExpr', 'NamedExpr', 'P', 'PP', 'PerItem',
           'PerItemExpr', 'R', 'RandomExpr', 'Root', 'Store', 'V', 'VariableExpr', 'W', 'WrapExpr', 'assign',
           'contains_expressions', 'evaluate', 'references', 'save_data_to']
assert __all__ == sorted(__all__)
