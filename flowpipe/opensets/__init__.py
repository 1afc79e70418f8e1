"""flowpipe.opensets"""

__all__: list[str] = []
