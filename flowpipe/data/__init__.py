"""flowpipe.data"""

__all__: list[str] = []
