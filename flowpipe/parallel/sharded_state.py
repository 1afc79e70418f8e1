"""State dicts of sharded modules: gathered whole for model files, or saved one shard per rank for checkpoints.

A module sharded with torch's ``fully_shard`` holds on each rank a slice of every parameter (a ``DTensor``), and
its optimizer the matching slices of its state. Two ways to save them:

- **gathered** (``full_model_state`` / ``full_optimizer_state``): every rank takes part, rank 0 receives the
  whole state on the CPU (torch's ``get_model_state_dict`` and ``get_optimizer_state_dict`` with
  ``full_state_dict=True, cpu_offload=True``), the other ranks an empty dict. The optimizer state comes back in
  the layout of ``torch.optim.Optimizer.state_dict`` (parameters numbered in the order of the optimizer's
  groups), so a file saved on N sharded ranks loads into one plain process, and into M ranks
  (``load_full_model_state`` / ``load_full_optimizer_state``: every rank gives the whole state and keeps its
  slice);
- **one shard per rank** (``save_shards`` / ``load_shards``): each rank writes its own slices with
  ``torch.distributed.checkpoint`` (DCP) into one folder, for models whose whole state does not fit one process.
  DCP reads a folder back into any number of ranks (it reshards), one plain process included.

Every function here except the ``load_full_*`` ones called with a whole state on each rank is a collective
when a process group is started: every rank calls it, in the same order.

DCP keeps a folder's metadata (``.metadata``) as a pickle and reads it back with Python's full unpickler; a folder
from elsewhere is read here through ``metadata_reader`` instead, which reads that pickle with an exact table of
DCP's own metadata classes and plain values (``flowpipe.safe_pickle.load_with_table``) unless ``trusted``: a
metadata file naming anything else is refused with ``UnsafeFileError`` before any of it is unpickled.
"""
from __future__ import annotations

import contextlib
import copy
import os
import shutil
import warnings
from typing import Any, Iterator, Mapping

import torch
from torch import nn

from .. import safe_pickle
from ..errors import UnsafeFileError

__all__ = ['SHARDS_SUFFIX', 'check_shard_files', 'filled', 'full_model_state', 'full_optimizer_state',
           'load_full_model_state', 'load_full_optimizer_state', 'load_sharded_state', 'load_shards', 'materialize',
           'metadata_reader', 'parameter_names', 'save_shards', 'sharded_state', 'skeleton']
assert __all__ == sorted(__all__)

#: the suffix of the folder of shards beside a checkpoint file (``checkpoint-000000004.shards``)
SHARDS_SUFFIX = '.shards'


def _options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions
    return StateDictOptions(**kwargs)


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _rank() -> int:
    return torch.distributed.get_rank() if _distributed() else 0


@contextlib.contextmanager
def _one_process() -> Iterator[None]:
    """Silence DCP's warning that it runs in one process: outside a job, that is what is meant."""
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='torch.distributed is disabled')
        yield


def _metadata_names() -> dict[str, Any]:
    """What a DCP metadata file may name: DCP's metadata classes, its storage records, paths and plain values."""
    import pathlib

    import torch.distributed.checkpoint.filesystem as filesystem
    import torch.distributed.checkpoint.metadata as metadata
    table = {**safe_pickle.value_names(), **safe_pickle.defined_in([metadata])}
    table.update({f'{value.__module__}.{value.__qualname__}': value
                  for value in (filesystem._StorageInfo, pathlib.PosixPath, pathlib.PurePosixPath,
                                pathlib.WindowsPath, pathlib.PureWindowsPath)})
    return table


def metadata_reader(folder: str, trusted: bool = False) -> Any:
    """DCP's ``FileSystemReader`` of ``folder`` whose metadata is read safely unless ``trusted`` (see the module
    docstring)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import StorageMeta

    class SafeReader(dcp.FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if trusted:
                return super().read_metadata(*args, **kwargs)
            path = self._get_metadata_path(kwargs.get('rank'))
            with open(path, 'rb') as file:
                data = file.read()
            metadata = safe_pickle.load_with_table(data, _metadata_names())
            if getattr(metadata, 'storage_meta', None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata
    return SafeReader(folder)


def skeleton(module: nn.Module) -> nn.Module:
    """A copy of ``module`` (before it is sharded) whose parameters are on the ``meta`` device (no memory) and whose
    buffers are CPU copies (on ``meta`` where they are: another stage's, on a rank of a pipeline): what a model file
    stores of a network given as ``config['model']``."""
    memo: dict[int, Any] = {id(param): nn.Parameter(torch.empty_like(param, device='meta'), param.requires_grad)
                            for param in module.parameters()}
    for buffer in module.buffers():
        memo[id(buffer)] = torch.empty_like(buffer, device='meta') if buffer.is_meta else buffer.detach().to(
            'cpu', copy=True)
    return copy.deepcopy(module, memo)


def filled(frame: nn.Module, state: Mapping[str, Any]) -> nn.Module | None:
    """A copy of a ``skeleton`` holding the whole ``state`` (its tensors, not copies); ``None`` for an empty state
    (a rank other than 0 after gathering)."""
    if not state:
        return None
    module = copy.deepcopy(frame)
    module.load_state_dict(dict(state), assign=True)
    return module


def materialize(module: nn.Module) -> nn.Module:
    """Give the ``meta`` parameters of a ``skeleton`` CPU memory (uninitialized: shards are read into them next),
    in place; ``module`` itself."""
    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if param is not None and param.is_meta:
                sub._parameters[name] = nn.Parameter(torch.empty_like(param, device='cpu'), param.requires_grad)
    return module


def parameter_names(module: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names (in ``module``) of the optimizer's parameters, in the order of its groups; a clear error for a
    parameter that is not the module's."""
    names = {id(param): name for name, param in module.named_parameters(remove_duplicate=False)}
    order = []
    for group in optimizer.param_groups:
        for param in group['params']:
            if id(param) not in names:
                raise ValueError(f"Expected an optimizer over the module's own parameters. Received: a parameter of "
                                 f"shape {tuple(param.shape)} that {type(module).__name__} does not hold. Build the "
                                 "optimizer on engine.parameters().")
            order.append(names[id(param)])
    return order


def full_model_state(module: nn.Module) -> dict:
    """The whole ``state_dict`` of a sharded ``module`` on rank 0 (CPU tensors, keys as in one process); ``{}`` on
    the other ranks. A collective."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict
    return get_model_state_dict(module, options=_options(full_state_dict=True, cpu_offload=True))


def load_full_model_state(module: nn.Module, state: Mapping[str, Any]) -> None:
    """Load a whole ``state_dict`` (keys as in one process, given on every rank) into a sharded ``module``: each
    rank keeps its slice."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict
    set_model_state_dict(module, dict(state), options=_options(full_state_dict=True, strict=True))


def full_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The whole state of ``optimizer`` (built on the sharded ``module``'s parameters) on rank 0, in the layout of
    ``Optimizer.state_dict()``; ``{}`` on the other ranks. A collective.

    An optimizer that has not stepped yet holds no state to gather: its own ``state_dict()`` is returned (torch's
    gathering helper would first take a step with a zero learning rate, which changes Adam's step count).
    """
    if not optimizer.state:
        return optimizer.state_dict() if _rank() == 0 else {}
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    state = get_optimizer_state_dict(module, optimizer, options=_options(full_state_dict=True, cpu_offload=True))
    return _numbered(state, parameter_names(module, optimizer)) if state else {}


def load_full_optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer,
                              state: Mapping[str, Any]) -> None:
    """Load the whole state of an optimizer (the layout of ``Optimizer.state_dict()``, given on every rank) into
    ``optimizer``, built on the sharded ``module``'s parameters: each rank keeps its slice."""
    if not state.get('state'):      # nothing per parameter: the groups' settings load as they are
        optimizer.load_state_dict(state)
        return
    names = parameter_names(module, optimizer)
    groups = state.get('param_groups', [])
    count = sum(len(group['params']) for group in groups)
    if count != len(names):
        raise ValueError(f"Expected optimizer state for {len(names)} parameters. Received state for {count} "
                         "parameters: the file's network differs from this model's.")
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict
    set_optimizer_state_dict(module, optimizer, _named(state, names), options=_options(full_state_dict=True))


def _numbered(state: Mapping[str, Any], names: list[str]) -> dict:
    """An optimizer state keyed by parameter names (torch's helpers) in ``Optimizer.state_dict()``'s layout."""
    index = {name: number for number, name in enumerate(names)}
    return {'state': {index[name]: value for name, value in state['state'].items()},
            'param_groups': [{**group, 'params': [index[name] for name in group['params']]}
                             for group in state['param_groups']]}


def _named(state: Mapping[str, Any], names: list[str]) -> dict:
    """``Optimizer.state_dict()``'s layout keyed by parameter names, as torch's helpers take it."""
    return {'state': {names[number]: value for number, value in state['state'].items()},
            'param_groups': [{**group, 'params': [names[number] for number in group['params']]}
                             for group in state['param_groups']]}


def sharded_state(module: nn.Module, optimizer: torch.optim.Optimizer | None, with_optimizer: bool | None = None
                  ) -> dict:
    """This rank's part of the module's and optimizer's state, for DCP: ``{'model': ..., 'optimizer': ...}``.

    ``with_optimizer``: whether to hold the optimizer's part; ``None``: once it has stepped (see
    ``full_optimizer_state``). A state to load a saved optimizer into passes ``True``: torch's helper then makes the
    state's tensors first, which the loaded values replace.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
    state = {'model': get_model_state_dict(module)}
    if with_optimizer is None:
        with_optimizer = optimizer is not None and bool(optimizer.state)
    if with_optimizer:
        state['optimizer'] = get_optimizer_state_dict(module, optimizer)
    return state


def load_sharded_state(module: nn.Module, optimizer: torch.optim.Optimizer | None, state: Mapping[str, Any]) -> None:
    """Put a ``sharded_state`` read by DCP into ``module`` and ``optimizer``."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict
    set_model_state_dict(module, state['model'])
    if optimizer is not None and 'optimizer' in state:
        set_optimizer_state_dict(module, optimizer, state['optimizer'])


def save_shards(folder: str, states: Mapping[str, dict]) -> None:
    """Write ``{name: sharded_state(...)}`` with DCP into ``folder``, atomically: into ``folder + '.tmp'`` (each
    rank its own file, rank 0 the metadata), then renamed by rank 0. A collective."""
    import torch.distributed.checkpoint as dcp
    temporary = folder + '.tmp'
    if _rank() == 0 and os.path.exists(temporary):          # left by a job killed while writing
        shutil.rmtree(temporary)
    if _distributed():
        torch.distributed.barrier()
    with _one_process():            # every rank returns once the metadata is written
        dcp.save(dict(states), checkpoint_id=temporary, no_dist=not _distributed())
    if _rank() == 0:
        if os.path.exists(folder):
            shutil.rmtree(folder)
        os.replace(temporary, folder)
    if _distributed():
        torch.distributed.barrier()


_DAMAGED = ("The checkpoint these shards belong to is damaged: resume from an earlier one (remove this one's file "
            "and its .shards folder, and resume=True takes the one before), or start afresh.")


def check_shard_files(folder: str, trusted: bool = False) -> None:
    """Every file a DCP folder's metadata names is there and long enough; else an error naming the file. The
    metadata is read safely unless ``trusted`` (``metadata_reader``)."""
    try:
        metadata = metadata_reader(folder, trusted).read_metadata()
    except UnsafeFileError as error:
        raise safe_pickle.unsafe(error, os.path.join(folder, '.metadata'), "a folder of shards' metadata",
                                 "trusted=True (checkpoint=Checkpoint(folder, trusted=True))") from None
    except Exception as error:  # a truncated metadata file fails to unpickle in many ways
        raise ValueError(f"Expected the DCP metadata of {folder!r}. Received: "
                         f"{os.path.join(folder, '.metadata')!r}, which cannot be read ({type(error).__name__}: "
                         f"{error}). {_DAMAGED}") from error
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Expected the shard file {path!r}, which the folder's metadata names. "
                                    f"Received: no such file. {_DAMAGED}")
        if os.path.getsize(path) < size:
            raise ValueError(f"Expected the shard file {path!r} of at least {size} bytes, as the folder's metadata "
                             f"says. Received: {os.path.getsize(path)} bytes: it is truncated. {_DAMAGED}")


def load_shards(folder: str, states: Mapping[str, dict], trusted: bool = False) -> None:
    """Read a folder ``save_shards`` wrote into ``{name: sharded_state(...)}`` of this job's modules, in place,
    whatever the number of ranks that wrote it; its metadata safely unless ``trusted``. A collective."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    if not os.path.isfile(os.path.join(folder, '.metadata')):
        raise FileNotFoundError(f"Expected a folder of shards written by a sharded checkpoint. Received: {folder!r}, "
                                "which holds no DCP metadata. Resume from a complete checkpoint, or start afresh.")
    check_shard_files(folder, trusted)
    try:
        with _one_process():
            dcp.load(states, storage_reader=metadata_reader(folder, trusted), no_dist=not _distributed())
    except (Exception, CheckpointException) as error:  # DCP's CheckpointException wraps each rank's failure
        raise ValueError(f"Expected shards of the same networks and optimizers as this run's. Received: {folder!r}, "
                         f"which does not fit ({type(error).__name__}: {error}). Resume with the pipeline that "
                         "wrote it.") from error
