"""flowpipe.parallel"""

__all__: list[str] = []
