"""The seeds of a run given ``run(seed=...)``: each model's initial weights and each training step's draws.

Both are spawn keys of the run's seed tree (``numpy.random.SeedSequence``), so they depend on the root seed and
the model's name only, never on the devices, the prefetch or the order the batches are processed in.
"""
from __future__ import annotations

import warnings
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..expr.context import Context

__all__ = ['SAID_INSTANCE', 'model_seed', 'step_seed', 'warn_instance']


#: the (model name, network class) pairs ``warn_instance`` spoke of: once per process each
SAID_INSTANCE: set[tuple[str, str]] = set()


def warn_instance(name: str, config: Any) -> None:
    """Say once that a network given as an instance keeps the weights it was made with, whatever ``run(seed=)``."""
    import torch
    network = config.get('model') if isinstance(config, Mapping) else None
    if isinstance(network, torch.nn.Module) and (name, type(network).__name__) not in SAID_INSTANCE:
        SAID_INSTANCE.add((name, type(network).__name__))
        warnings.warn(f"flowpipe: run(seed=...) does not set the initial weights of model {name!r}: its config gives "
                      f"the network as an instance ({type(network).__name__}), made before the run, so it starts "
                      "from the weights it was made with, and two runs with one seed differ unless they share them. "
                      f"Give the class or a function that makes it ('model': {type(network).__name__} or "
                      "'model': lambda: ...) so the run makes it under its seed, or seed torch before making it "
                      "(torch.manual_seed).", UserWarning, stacklevel=2)


def model_seed(root: int, name: str) -> int:
    """The torch seed of the model ``name`` in a run with root seed ``root``.

    It is spawn key ``(0, crc32(name))`` of the run's seed tree: beside the shuffle (``(0,)``) and the batches
    (``(1 + stage, seq)``), and different for every model name.
    """
    words = np.random.SeedSequence(root, spawn_key=(0, zlib.crc32(name.encode()))).generate_state(2, np.uint32)
    return int(words[0]) << 32 | int(words[1])


def step_seed(ctx: Context, name: str, iteration: int) -> int | None:
    """The seed of a training step of the model ``name`` on the batch of ``ctx`` in a run given a seed.

    It is spawn key ``(*batch key, crc32(name), iteration)`` of the run's seed tree (the batch's key is
    ``(1 + stage, seq)``), so every step of every model on every batch has its own; ``None`` in a run that drew
    its own seed (the engine then draws one from torch's global generator).
    """
    seed = ctx.seed
    if seed is None or not getattr(seed, 'given', True):
        return None
    key = (*seed.spawn_key, zlib.crc32(name.encode()), int(iteration))
    words = np.random.SeedSequence(seed.entropy, spawn_key=key).generate_state(2, np.uint32)
    return (int(words[0]) << 32 | int(words[1])) >> 1
