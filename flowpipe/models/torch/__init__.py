"""flowpipe.models.torch"""

__all__: list[str] = []
