"""``TorchModel``'s files: ``save`` (flowpipe's own file, ``io``, or another format, ``export``; in a distributed job
every rank calls it and rank 0 writes), ``load`` and batchflow's batch-size finder (``batch_size``).

``ModelFiles`` is one of ``TorchModel``'s bases (``model.py``), which keeps ``from_file`` and ``__reduce__``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...parallel import distributed
from . import batch_size as batch_size_module, export, io

if TYPE_CHECKING:
    from .model import TorchModel

__all__ = ['ModelFiles']


class ModelFiles:
    """``TorchModel``'s ``save`` and ``load``."""

    def save(self, path: str, fmt: str | None = None, *, batch_size: int | None = None,
             opset_version: int | None = None, pickle_metadata: bool = True, pickle_module: Any = None,
             ignore_attributes: Any = None, **kwargs: Any) -> None:
        """Write the model to ``path``: flowpipe's own file (``fmt=None``: network, optimizer, scheduler, config,
        atomically, with dill or batchflow's ``pickle_module=pickle``) or, as batchflow's ``save(fmt=...)``,
        ``'onnx'``, ``'safetensors'``, ``'torchscript'`` or ``'export'`` (``flowpipe.models.torch.export``:
        ``batch_size`` fixes the exported batch size, ``opset_version`` the ONNX opset, ``pickle_metadata`` adds the
        metadata file, ``kwargs`` go to the exporter).

        In a distributed job every rank calls it and rank 0 writes, after every rank has arrived (replicas hold
        the same weights; a sharded engine's ranks first gather the whole state on rank 0), and every rank returns
        once the file is there: a ``load`` right after it finds the file on every rank.
        """
        engine = self._built()
        export.check_save_options(fmt, pickle_module, ignore_attributes, pickle_metadata, batch_size,
                                  opset_version, kwargs)
        if fmt is not None and engine.collective_state:
            export.refuse_sharded(self)         # on every rank, before any rank waits for the others
        distributed.barrier()
        if engine.collective_state:
            contents = io.payload(self)         # every rank takes part in gathering; rank 0 receives the state
            if distributed.is_main():
                io.write(contents, path, pickle_module)
        elif distributed.is_main():
            if fmt is None:
                io.save(self, path, pickle_module)
            else:
                export.export_file(self, path, fmt, batch_size=batch_size, opset_version=opset_version,
                                   pickle_metadata=pickle_metadata, pickle_module=pickle_module, **kwargs)
        distributed.barrier()

    def load(self, path: str, fmt: str | None = None, *, trusted: bool = False,
             pickle_module: Any = None) -> 'TorchModel':
        """Load a file's state into this model, keeping its own placement: a file of ``save`` (weights, optimizer
        and the rest), or the weights of a safetensors, TorchScript or ``torch.export`` file (or of an export's
        metadata file); ``fmt`` names the format where the extension does not (batchflow's ``'pt'``: a file of
        ``save``). A file of ``save`` is read safely (``flowpipe.safe_pickle``); one that names other code needs
        ``trusted=True``, which runs it. ``pickle_module``, batchflow's, may be dill or pickle (the safe reader reads
        both)."""
        export.check_pickle_module(pickle_module)
        export.load(self, path, fmt, trusted=trusted)
        return self

    # batchflow's batch-size finder, with its signatures (the model is the first argument)
    compute_optimal_batch_size = batch_size_module.compute_optimal_batch_size
    get_memory_utilization = batch_size_module.get_memory_utilization
