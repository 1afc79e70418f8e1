"""flowpipe.execution"""

__all__: list[str] = []
