"""flowpipe.models"""

__all__: list[str] = []
