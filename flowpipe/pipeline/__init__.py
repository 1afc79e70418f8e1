"""Pipeline definitions and built-in actions."""
from .registry import builtin, builtin_names, get_builtin

__all__ = ['builtin', 'builtin_names', 'get_builtin']
