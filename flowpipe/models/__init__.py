"""Models: ``flowpipe.models.torch`` holds ``TorchModel`` and the ready networks."""

__all__: list[str] = []
