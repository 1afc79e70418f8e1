"""flowpipe.progress"""

__all__: list[str] = []
