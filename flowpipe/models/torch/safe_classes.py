"""The classes of ``flowpipe.models.torch`` that its files hold, registered with the safe reader
(``flowpipe.safe_pickle.allow``) when the package is imported: the layers, blocks, parts and networks of a ready
network given as ``config['model']`` (or named in a config, ``'body/block': ResBlock``), the segmentation losses,
and the model callbacks (``LogCallback``, ``ReduceLROnPlateau``; ``EarlyStopping`` and its ``Plateau`` rule are
registered by ``flowpipe.callbacks``).

Each of them builds a module or holds a rule's numbers: calling one with a file's arguments, or filling it from a
file's state, touches no file and no other module. The model classes themselves are not here: a file names its
model class by name (``io.class_name``), and ``TorchModel`` classes register with ``io`` as they are defined.
"""
from __future__ import annotations

from torch import nn

from ... import safe_pickle
from . import callbacks, networks, parts, segmentation_losses
from .blocks import core as block_core, modules as block_modules, named as named_blocks, network
from .layers import combine, conv, core as layer_core, multilayer, pooling, resize

__all__ = ['register']

#: the modules whose network classes files hold
NETWORK_MODULES = (block_core, block_modules, named_blocks, network, combine, conv, layer_core, multilayer, pooling,
                   resize, networks, parts, segmentation_losses)


def register() -> None:
    """Register the package's network classes and model callbacks with the safe reader."""
    safe_pickle.allow(*safe_pickle.defined_in(NETWORK_MODULES, nn.Module).values())
    safe_pickle.allow(callbacks.LogCallback, callbacks.PlateauCallback, callbacks.ReduceLROnPlateau)
