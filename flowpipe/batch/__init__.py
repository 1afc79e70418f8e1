"""flowpipe.batch"""

__all__: list[str] = []
