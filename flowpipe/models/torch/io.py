"""Saving and loading ``TorchModel``s.

A model file is one ``torch.save`` zip of a dict (``flowpipe.safe_pickle``): a format tag and version, the flowpipe
and torch versions, the model class (by name: ``'module.qualname'``, looked up among the ``TorchModel`` classes
defined in the process), the config (a ready ``nn.Module`` given as ``config['model']`` is stored as a CPU copy),
and the state: ``{part: its state}`` of the model's parts (``TorchModel.parts()``, listed once in
``flowpipe.models.torch.state`` for model files and run checkpoints alike: network weights and buffers, optimizer
and scheduler state, the precision's state, the counters, the model's callbacks, the averaged network of
``weights_averaging``). Every tensor is on the CPU and a stored module carries no placement hooks, so a file saved
from any device layout (GPUs, model parallel) loads into any other: the engine places the module and the weights
again (``engine.sync``).

A model pickles through the same contents (``TorchModel.__reduce__``: ``payload`` out, ``restore`` in), with its
class as the class itself.

Saving is atomic: the file is written under a temporary name in the same folder, flushed to disk, then renamed
over the target. Reading is safe by default (``flowpipe.safe_pickle``: torch's restricted unpickler over an exact
table of names): it rebuilds tensors, containers, flowpipe's networks and callbacks and the modules of
``torch.nn``, and refuses a file that names any other code (a network class of the user's own, a lambda in the
config) with ``UnsafeFileError``, as it refuses a model callback that would write to a path the file names;
``trusted=True`` reads it with dill, running whatever code it holds. Files of format version 1 (bare dill
pickles) are read trusted only.
"""
from __future__ import annotations

import copy
import importlib
import itertools
import os
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import torch

from ... import safe_pickle
from ...atomic import dump_atomically
from ...errors import ModelFileError, UnsafeFileError, add_note
from ...parallel.model_parallel import remove_move_hooks
from ...parallel.sharded_state import filled, materialize
from .checkpointing import remove_checkpointing
from .config import flat_paths, nest

if TYPE_CHECKING:
    from .model import TorchModel

__all__ = ['FORMAT', 'FORMAT_VERSION', 'accept', 'build_from', 'check_class', 'class_name', 'class_of', 'for_file',
           'from_payload', 'load', 'load_into', 'payload', 'read', 'register_class', 'restore', 'restore_pending', 'save',
           'write']

FORMAT = 'flowpipe-model'
FORMAT_VERSION = 2          # 2: a torch.save zip, the model class by name; 1: a bare dill pickle

#: the ``TorchModel`` classes defined in this process, by ``'module.qualname'`` (``register_class``)
_CLASSES: 'weakref.WeakValueDictionary[str, type]' = weakref.WeakValueDictionary()


def class_name(cls: type) -> str:
    """How a file names a model class."""
    return f'{cls.__module__}.{cls.__qualname__}'


def register_class(cls: type) -> None:
    """Let files name ``cls`` (every ``TorchModel`` class registers itself when it is defined)."""
    _CLASSES[class_name(cls)] = cls


def _flowpipe_version() -> str:
    from ... import __version__
    return __version__


def _cpu_copy(module: torch.nn.Module) -> torch.nn.Module:
    """A deep copy of ``module`` whose parameters and buffers are made on the CPU directly (copying a GPU module
    first would need a second copy of its weights on the GPU), without placement hooks or checkpointed forwards (the
    config's keys put them back where it loads)."""
    memo: dict[int, Any] = {}
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        cpu = tensor.detach().to('cpu', copy=True)
        if isinstance(tensor, torch.nn.Parameter):
            cpu = torch.nn.Parameter(cpu, tensor.requires_grad)
        memo[id(tensor)] = cpu          # deepcopy takes these instead of copying the originals
    return remove_checkpointing(remove_move_hooks(copy.deepcopy(module, memo))).to('cpu')


def payload(model: 'TorchModel', tensors: bool = True) -> dict:
    """What a model file holds: format, versions, class, config, network and the training state (CPU tensors).

    ``tensors=False`` leaves the network's and the optimizer's state out (``None``): a sharded checkpoint writes
    them one shard per rank beside it. Under an engine whose ``collective_state`` is set, every rank calls this
    (the gathering is collective) and only rank 0's holds the state.
    """
    engine = model._built()
    config = dict(model.config)
    state = model.state(tensors)
    module = None
    if config.get('model') is not None:
        # The config holds the live network (maybe on a GPU, maybe split over devices): store a CPU copy without
        # the input-moving hooks of its placement; loading places it again as the (new) config says. A sharded
        # network cannot be copied: its skeleton (taken before sharding) is filled with the gathered state.
        frame = getattr(engine, 'skeleton', None)
        module = (_cpu_copy(model.model) if frame is None else frame if state['network'] is None
                  else filled(frame, state['network']))
        # a rank other than 0 of a gathering engine (a pipeline's stages) holds no state, and no module
        module = None if module is None else remove_checkpointing(module)
        config['model'] = None
    return {
        'format': FORMAT, 'format_version': FORMAT_VERSION,
        'flowpipe_version': _flowpipe_version(), 'torch_version': str(torch.__version__),
        'model_class': type(model), 'config': config, 'module': module, 'state': state,
    }


def save(model: 'TorchModel', path: str | os.PathLike, pickle_module: Any = None) -> None:
    """Write ``model`` to ``path``: a temporary file in the same folder, fsync, then ``os.replace``."""
    write(payload(model), path, pickle_module)


def for_file(contents: dict) -> dict:
    """A ``payload`` as files keep it: its model class by name."""
    cls = contents['model_class']
    return {**contents, 'model_class': class_name(cls) if isinstance(cls, type) else cls}


def write(contents: dict, path: str | os.PathLike, pickle_module: Any = None) -> None:
    """Write a model's ``payload`` to ``path`` atomically (as ``save``; ``pickle_module``: see
    ``safe_pickle.dump``); a failed write (a full disk, a quota) keeps its ``OSError`` with a note naming the file
    and what was kept."""
    try:
        dump_atomically(for_file(contents), path, pickle_module)
    except OSError as error:
        before = 'the file already there is unchanged' if os.path.exists(path) else 'no file was left'
        add_note(error, f"Expected to write the model file {os.fspath(path)!r}. Received: {error.strerror or error} "
                        f"while writing it; {before}. Free space in {os.path.dirname(os.path.abspath(path))!r} (or "
                        "save to another folder), then save again.")
        raise


TRUST = "trusted=True (TorchModel.from_file(path, trusted=True), model.load(path, trusted=True))"


def read(path: str | os.PathLike, formats: tuple[str, ...] = (FORMAT,), trusted: bool = False) -> dict:
    """The checked contents of a model file (of one of ``formats``: an export's metadata file is another);
    ``ModelFileError`` when it is corrupt, foreign or too new; ``UnsafeFileError`` when it names code other than
    torch's and flowpipe's models, unless ``trusted``."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Expected a model file saved by flowpipe. Received: path={path!r}, which does not "
                                "exist. Check the path, or save the model first.")
    try:
        with open(path, 'rb') as file:
            payload = safe_pickle.load(file, trusted)
    except UnsafeFileError as error:
        raise safe_pickle.unsafe(error, path, 'a model file', TRUST) from None
    except Exception as error:  # a truncated or foreign pickle raises many different types
        raise ModelFileError(f"Expected a flowpipe model file. Received: {path!r}, which cannot be unpickled "
                             f"({type(error).__name__}: {error}); it is corrupt, truncated or not a model file. "
                             "Save the model again.") from error
    if not isinstance(payload, dict) or payload.get('format') not in formats:
        raise ModelFileError(f"Expected a flowpipe model file (format {FORMAT!r}). Received: {path!r} holding "
                             f"{type(payload).__name__}; it was not written by TorchModel.save.")
    version = payload.get('format_version')
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise ModelFileError(f"Expected a model file of format version {FORMAT_VERSION} or older. Received: "
                             f"{path!r}, format version {version!r}, written by flowpipe "
                             f"{payload.get('flowpipe_version')!r}. Upgrade flowpipe to read it.")
    return accept(payload, path, trusted)


def accept(contents: dict, path: str, trusted: bool = False, what: str = 'a model file', opt_in: str = TRUST) -> dict:
    """A model's contents read from the file ``path`` (``what``, opened trusted by ``opt_in``), its class found by
    name; a file read safely is refused (``UnsafeFileError``) where its model callbacks would write to a path the
    file names."""
    contents = {**contents, 'model_class': _model_class(contents.get('model_class'), path, trusted)}
    if not trusted:
        config = contents.get('config')
        callbacks = config.get('callbacks') if isinstance(config, dict) else None
        for callback in callbacks if isinstance(callbacks, (list, tuple)) else ():
            stream = getattr(callback, 'stream', None)
            if isinstance(stream, (str, os.PathLike)):
                raise UnsafeFileError(
                    f"Expected {what} whose model callbacks write nowhere or to a callable. Received: {path!r}, "
                    f"whose {type(callback).__name__} writes to the file {stream!r} that the file names: training "
                    f"the loaded model would overwrite it. If you trust where the file comes from, open it with "
                    f"{opt_in}; or load the weights into a model of your own config (model.load(path)).")
    return contents


def _model_class(name: Any, path: str, trusted: bool) -> type | str:
    """The class a file names (a class itself in a file of format 1, read trusted); its name where no
    ``TorchModel`` class of that name is defined in the process (``from_payload`` says so, unless it is given
    another class)."""
    from .model import TorchModel
    if isinstance(name, type):
        return name
    if not isinstance(name, str):
        raise ModelFileError(f"Expected a model file naming its model class. Received: {path!r} with "
                             f"model_class={name!r}. Save the model again.")
    found = _CLASSES.get(name)
    if found is None and trusted:
        module, _, qualname = name.rpartition('.')
        try:
            found = importlib.import_module(module)
            for part in qualname.split('.'):
                found = getattr(found, part)
        except (ImportError, AttributeError, ValueError):
            found = None
    return found if isinstance(found, type) and issubclass(found, TorchModel) else name


def class_of(contents: dict, model_class: type | None = None) -> type:
    """The class to build a file's model with: ``model_class``, or the class the file names."""
    cls = model_class or contents['model_class']
    if not isinstance(cls, type):
        raise ModelFileError(f"Expected the file's model class, {cls}, to be a TorchModel class defined in this "
                             "process. Received: no such class. Import the module that defines it before loading, or "
                             "load with that class (MyModel.from_file(path)); trusted=True imports the module the "
                             "file names.")
    return cls


def load_into(model: 'TorchModel', payload: dict) -> None:
    """Copy the saved weights, optimizer and scheduler state into ``model`` and re-place its replicas (a
    sharded checkpoint's weights, saved as ``None``, are read from its shards after this)."""
    model.load_state(payload['state'])


def load(path: str | os.PathLike, model_class: type | None = None, trusted: bool = False,
         **overrides: Any) -> 'TorchModel':
    """A new model from a file, built by its saved class (or ``model_class``) with ``overrides`` on its config;
    ``trusted`` reads a file naming other code (``read``)."""
    return from_payload(read(path, trusted=trusted), model_class, **overrides)


def from_payload(contents: dict, model_class: type | None = None, **overrides: Any) -> 'TorchModel':
    """A new model from the contents of a model file (``payload``), as ``load`` makes it."""
    cls = class_of(contents, model_class)
    check_class(cls, contents['model_class'])
    model = cls(_saved_config(contents), **overrides)
    load_into(model, contents)
    return model


def _saved_config(contents: dict) -> dict:
    config = dict(contents['config'])
    if contents.get('module') is not None:
        # a sharded checkpoint's skeleton gets memory here, and its weights from the shards next
        config['model'] = materialize(copy.deepcopy(contents['module']))
    return config


def build_from(model: 'TorchModel', contents: dict) -> None:
    """Build ``model``, not built yet for want of an input shape, by the config of a file it loads (a model file
    or an export's metadata file), its own config items on top: batchflow's ``VGG7().load(path)``."""
    check_class(type(model), contents['model_class'])
    config = {**flat_paths(_saved_config(contents)), **flat_paths(model.config)}
    # the weights drawn are replaced by the file's: the caller's generator is left as it was; the file's config
    # warned when its model was made
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        type(model).__init__(model, nest(config))
    model.__dict__.pop('_pending_rng', None)


def check_class(wanted: type, saved: type) -> None:
    """A file loads into its own class, a subclass or a base of it; another network is named, with the fix."""
    if isinstance(saved, type) and not (issubclass(wanted, saved) or issubclass(saved, wanted)):
        raise ModelFileError(f"Expected a file of {wanted.__name__} (or a class related to it). Received: a file of "
                             f"{saved.__module__}.{saved.__qualname__}. Load it with {saved.__name__}.from_file(path) "
                             "or TorchModel.from_file(path), which build the file's own class.")


def restore(contents: dict) -> 'TorchModel':
    """A model unpickled from ``payload``'s contents (``TorchModel.__reduce__``), as ``from_payload`` makes it.

    Building the network draws initial weights that the saved ones replace: the caller's torch generator is left
    as it was. The config's warnings (unknown keys) were given when the model was made, and are not repeated.
    """
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return from_payload(contents)


def restore_pending(cls: type, config: dict, rng_state: torch.Tensor) -> 'TorchModel':
    """A model whose network is built at its first step, unpickled: its class, config and the random state its
    weights will be drawn from."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        model = cls(config)
    model._pending_rng = rng_state
    return model
