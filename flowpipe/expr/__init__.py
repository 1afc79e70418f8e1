"""Named expressions: placeholders evaluated while a batch is processed."""
from .context import Context, Store

__all__ = ['Context', 'Store']
