"""Saving a model's network in other formats (batchflow's ``save(path, fmt=...)``) and loading what can be loaded.

Formats, each through its own library: ``'onnx'`` (``torch.onnx.export``, torch's exporter built on
``torch.export``: needs the ``onnx`` and ``onnxscript`` packages), ``'safetensors'`` (the weights and buffers, by the
``safetensors`` package), ``'torchscript'`` (``torch.jit.trace`` or ``torch.jit.script``, then ``torch.jit.save``)
and ``'export'`` (``torch.export.export`` then ``torch.export.save``, a ``.pt2`` file). The optional packages are
flowpipe's ``export`` extra: ``pip install 'flowpipe[export]'``.

What is exported is a CPU copy of the primary network in evaluation mode, whatever the model's placement. Example
inputs are random tensors of the config's input shapes (``inputs/<name>/shape``), in the parameters' dtype, with
``batch_size`` items: given, the batch size is fixed in the file (as in batchflow); not given, the example batch has
``placeholder_batch_size`` (default 2) items and the batch dimension is dynamic (ONNX, ``torch.export``).

With ``pickle_metadata=True`` (batchflow's default) ``path`` gets a small metadata file (flowpipe's: the model
class, the config, the batch counter and the name of the exported file), and the export goes next to it, the
format's extension replacing ``path``'s (``model.pkl`` -> ``model.onnx``). ``from_file`` of the metadata file
builds the model from its class and config and loads the weights of the exported file; ``load`` of it (or of the
exported file itself) loads those weights into an existing model. safetensors, TorchScript and ``torch.export``
files hold the network's ``state_dict`` under the same names and load back exactly; ONNX files do not load back
(run them with ``onnxruntime``). A bare TorchScript or ``.pt2`` file loads by ``from_file`` as a ``TorchModel``
around the loaded module (for predictions).
"""
from __future__ import annotations

import importlib
import os
import pickle
import tempfile
from typing import TYPE_CHECKING, Any, Callable

import dill
import torch

from ...atomic import dump_atomically
from ...errors import ModelFileError
from . import io

if TYPE_CHECKING:
    from .model import TorchModel

__all__ = ['EXTENSIONS', 'META_FORMAT', 'ExportedModule', 'check_save_options', 'export_file', 'file_format',
           'from_file', 'load', 'refuse_sharded', 'require']

#: format -> extension of its file
EXTENSIONS = {'onnx': '.onnx', 'safetensors': '.safetensors', 'torchscript': '.torchscript.pt', 'export': '.pt2'}
META_FORMAT = 'flowpipe-export-metadata'
_INSTALL = "Install flowpipe's export extra: pip install 'flowpipe[export]'"


def require(module: str, fmt: str) -> Any:
    """Import ``module``; an ``ImportError`` naming the package, the format and the extra when it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"Expected the {module.split('.')[0]!r} package to handle fmt={fmt!r}. Received: "
                          f"{error}. {_INSTALL}.") from error


def check_pickle_module(pickle_module: Any) -> None:
    """batchflow's ``pickle_module`` of ``save`` and ``load``: dill (flowpipe's, None) or pickle, whose streams
    flowpipe's safe reader reads alike."""
    if pickle_module not in (None, dill, pickle):
        raise ValueError(f"Expected pickle_module=None, dill or pickle: flowpipe writes its files with one of them "
                         f"and reads them with its own safe reader. Received: pickle_module={pickle_module!r}. "
                         "Remove it.")


def check_save_options(fmt: str | None, pickle_module: Any, ignore_attributes: Any, pickle_metadata: bool,
                       batch_size: int | None, opset_version: int | None, kwargs: dict) -> None:
    """Refuse batchflow's ``save`` arguments that would not do here what they do in batchflow."""
    check_pickle_module(pickle_module)
    if ignore_attributes:
        raise ValueError(f"Expected no ignore_attributes: flowpipe's file always holds the optimizer and scheduler "
                         f"state, so that training resumes exactly. Received: ignore_attributes={ignore_attributes!r}."
                         " Remove it, or save the weights alone with fmt='safetensors'.")
    if fmt is not None:
        return
    given = {'batch_size': batch_size, 'opset_version': opset_version, **kwargs}
    given = {key: value for key, value in given.items() if value is not None}
    if given or not pickle_metadata:
        given = given or {'pickle_metadata': pickle_metadata}
        raise ValueError(f"Expected only a path for flowpipe's own file (fmt=None), which always holds the network, "
                         f"its training state and its config. Received: {given!r}. Remove them, or pick an export "
                         f"format: fmt in {sorted(EXTENSIONS)}.")


def export_file(model: 'TorchModel', path: str, fmt: str, batch_size: int | None = None,
                opset_version: int | None = None, pickle_metadata: bool = True, jit: str = 'trace',
                pickle_module: Any = None, **kwargs: Any) -> str:
    """Write the model's network to ``path`` in ``fmt`` (with the metadata file, pickled by dill or
    ``pickle_module``, see the module docstring); returns the exported file's path. ``kwargs`` go to the exporter
    (``torch.onnx.export``, ``torch.export.export``, ``torch.jit.trace``/``script``; ``metadata=`` for
    safetensors)."""
    if fmt not in EXTENSIONS:
        raise ValueError(f"Expected fmt as None (flowpipe's own file) or one of {sorted(EXTENSIONS)}. Received: "
                         f"fmt={fmt!r}.")
    if opset_version is not None and fmt != 'onnx':
        raise ValueError(f"Expected opset_version only with fmt='onnx'. Received: opset_version={opset_version!r} "
                         f"with fmt={fmt!r}. Remove it.")
    target = _exported_path(os.fspath(path), fmt) if pickle_metadata else os.fspath(path)
    writers: dict[str, Callable[..., None]] = {'onnx': _write_onnx, 'safetensors': _write_safetensors,
                                               'torchscript': _write_torchscript, 'export': _write_export}
    options = {'opset_version': opset_version} if fmt == 'onnx' else {'jit': jit} if fmt == 'torchscript' else {}
    if fmt == 'safetensors' and batch_size is not None:
        raise ValueError("Expected no batch_size with fmt='safetensors' (weights only). Received: "
                         f"batch_size={batch_size!r}. Remove it.")
    _in_place(target, lambda temporary: writers[fmt](model, temporary, batch_size, **options, **kwargs))
    if pickle_metadata:
        dump_atomically(_metadata(model, fmt, target, batch_size, opset_version), path, pickle_module)
    return target


def _exported_path(path: str, fmt: str) -> str:
    extension = EXTENSIONS[fmt]
    if path.endswith(extension):
        raise ValueError(f"Expected the path of the metadata file, without {extension!r}: with pickle_metadata=True "
                         f"the {fmt} file goes next to it. Received: {path!r}. Pass e.g. "
                         f"{path[:-len(extension)] + '.pkl'!r}, or pickle_metadata=False to write only the {fmt} "
                         "file.")
    return os.path.splitext(path)[0] + extension


def _in_place(path: str, write: Callable[[str], None]) -> None:
    """Write through ``write(temporary)`` then rename over ``path``: the file appears complete or not at all."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f'.{os.path.basename(path)}.',
                                         suffix='.tmp' + os.path.splitext(path)[1])    # torch.export wants .pt2
    os.close(handle)
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def refuse_sharded(model: 'TorchModel') -> None:
    """The error for an export of a model sharded over the ranks: its module holds only this rank's shards."""
    raise ValueError("Expected a whole network to export. Received: a model sharded over the ranks "
                     f"(sharding={model.spec.get('sharding')!r}), whose module holds only shards. Save it with "
                     "fmt=None (the whole state is gathered into one file), then export it in one process: "
                     "TorchModel.from_file(path).save(..., fmt=...).")


def _network(model: 'TorchModel') -> torch.nn.Module:
    if any(hasattr(p, 'placements') for p in model.model.parameters()):        # DTensor shards
        refuse_sharded(model)
    return io._cpu_copy(model.model).eval()


def _examples(model: 'TorchModel', batch_size: int | None) -> tuple[torch.Tensor, ...]:
    """Random inputs of the configured shapes, in the parameters' dtype, drawn without touching torch's generator."""
    spec = model.spec
    names = spec.input_names or ('images',)
    missing = [name for name in names if name not in spec.shapes]
    if missing:
        raise ValueError(f"Expected the shape of every network input to make example inputs. Received: no shape for "
                         f"{missing}. Add 'inputs/{missing[0]}/shape' to the config, or run a step first.")
    batch = batch_size if batch_size is not None else int(spec.get('placeholder_batch_size') or 2)
    if batch_size is None and batch < 2:
        raise ValueError(f"Expected placeholder_batch_size of 2 or more for a dynamic batch dimension (torch.export "
                         f"fixes sizes 0 and 1). Received: {batch}. Pass batch_size= to fix the batch size instead.")
    dtype = next((p.dtype for p in model.model.parameters() if p.is_floating_point()), torch.float32)
    generator = torch.Generator().manual_seed(0)
    return tuple(torch.rand((batch, *spec.shapes[name]), generator=generator, dtype=dtype) for name in names)


def _dynamic(examples: tuple, batch_size: int | None) -> Any:
    if batch_size is not None:
        return None
    batch = torch.export.Dim('batch')
    return tuple({0: batch} for _ in examples)


def _write_onnx(model: 'TorchModel', path: str, batch_size: int | None, opset_version: int | None,
                **kwargs: Any) -> None:
    onnx = require('onnx', 'onnx')
    require('onnxscript', 'onnx')
    examples = _examples(model, batch_size)
    kwargs.setdefault('external_data', False)           # one file, as batchflow's
    kwargs.setdefault('input_names', list(model.spec.input_names or ('images',)))
    if kwargs.get('dynamo', True):
        kwargs.setdefault('dynamic_shapes', _dynamic(examples, batch_size))
        kwargs.setdefault('verbose', False)
    torch.onnx.export(_network(model), examples, path, opset_version=opset_version, **kwargs)
    written = {entry.domain: entry.version for entry in onnx.load(path, load_external_data=False).opset_import}
    if opset_version is not None and written.get('', opset_version) != opset_version:
        raise ValueError(f"Expected an ONNX file of opset {opset_version}. Received: torch's exporter wrote opset "
                         f"{written.get('')} (it converts to older opsets only where onnx has adapters). Pass "
                         "opset_version=None (torch's default) or a newer opset, or dynamo=False for torch's older "
                         "TorchScript-based exporter.")


def _write_safetensors(model: 'TorchModel', path: str, batch_size: int | None, metadata: dict | None = None) -> None:
    save = require('safetensors.torch', 'safetensors').save
    state = model._built().state_dict()
    odd = [key for key, value in state.items() if not isinstance(value, torch.Tensor)]
    if odd:
        raise ValueError(f"Expected a state_dict of tensors for safetensors. Received: entries {odd} that are not "
                         "tensors. Save in flowpipe's own format (fmt=None).")
    tensors = {key: value.detach().to('cpu', copy=True).contiguous() for key, value in state.items()}
    with open(path, 'wb') as file:
        file.write(save(tensors, metadata={'format': 'pt', **(metadata or {})}))


def _write_torchscript(model: 'TorchModel', path: str, batch_size: int | None, jit: str = 'trace',
                       **kwargs: Any) -> None:
    network = _network(model)
    if jit == 'trace':
        scripted = torch.jit.trace(network, _examples(model, batch_size), **kwargs)
    elif jit == 'script':
        scripted = torch.jit.script(network, **kwargs)
    else:
        raise ValueError(f"Expected jit='trace' or 'script' for fmt='torchscript'. Received: jit={jit!r}.")
    torch.jit.save(scripted, path)


def _write_export(model: 'TorchModel', path: str, batch_size: int | None, **kwargs: Any) -> None:
    examples = _examples(model, batch_size)
    kwargs.setdefault('dynamic_shapes', _dynamic(examples, batch_size))
    torch.export.save(torch.export.export(_network(model), examples, **kwargs), path)


def _metadata(model: 'TorchModel', fmt: str, target: str, batch_size: int | None,
              opset_version: int | None) -> dict:
    contents = io.payload(model)
    return {'format': META_FORMAT, 'format_version': io.FORMAT_VERSION, 'flowpipe_version': contents['flowpipe_version'],
            'torch_version': contents['torch_version'], 'model_class': io.class_name(contents['model_class']),
            'config': contents['config'], 'module': contents['module'], 'iteration': model.iteration,
            'exported': {'fmt': fmt, 'file': os.path.basename(target), 'batch_size': batch_size,
                         'opset_version': opset_version}}


def file_format(path: str, fmt: str | None = None) -> str | None:
    """The format of a file to load: ``fmt`` if given, else from its extension; ``None`` for flowpipe's own file
    (a model file or an export's metadata file), which batchflow's ``fmt='pt'`` also names."""
    if fmt == 'pt':
        return None
    if fmt is not None:
        if fmt not in EXTENSIONS:
            raise ValueError(f"Expected fmt as None ('pt') or one of {sorted(EXTENSIONS)}. Received: fmt={fmt!r}.")
        return fmt
    path = os.fspath(path)
    return next((name for name, extension in EXTENSIONS.items() if path.endswith(extension)), None)


def _exported(path: str | os.PathLike, metadata: dict) -> tuple[str, str]:
    exported = metadata['exported']
    return os.path.join(os.path.dirname(os.path.abspath(path)), exported['file']), exported['fmt']


#: the formats whose files are programs (a graph torch runs, TorchScript's own ``__setstate__`` code)
PROGRAMS = ('torchscript', 'export')


def _check_program(path: str, fmt: str, trusted: bool) -> None:
    """A TorchScript or ``torch.export`` file holds code that loading it and predicting with it run: it is
    opened only when the caller says it is trusted."""
    if fmt in PROGRAMS and not trusted:
        from ...errors import UnsafeFileError
        raise UnsafeFileError(f"Expected a file that loads without running code. Received: {path!r}, a {fmt} file: a "
                              "program (its graph, and the code its modules run as they load), which flowpipe opens "
                              "only when told it is trusted. If you trust where it comes from, pass trusted=True "
                              "(model.load(path, trusted=True), TorchModel.from_file(path, trusted=True)); to share "
                              "weights with others, save with fmt='safetensors' or fmt=None.")


def _state_dict(path: str, fmt: str, trusted: bool = False) -> dict:
    """The network's weights and buffers stored in an exported file (a program's only when ``trusted``)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Expected a {fmt} file at {path!r}. Received: no such file. Check the path (a "
                                "metadata file needs its exported file beside it).")
    _check_program(path, fmt, trusted)
    if fmt == 'safetensors':
        return _read_export(path, fmt, require('safetensors.torch', fmt).load_file)
    if fmt == 'torchscript':
        return _read_export(path, fmt, lambda at: torch.jit.load(at, map_location='cpu')).state_dict()
    if fmt == 'export':
        return _read_export(path, fmt, torch.export.load).module().state_dict()
    raise ValueError(f"Expected a format flowpipe loads back (safetensors, torchscript, export). Received: {path!r} "
                     "in ONNX, whose graph keeps no network to load weights into. Run it with onnxruntime "
                     "(onnxruntime.InferenceSession(path)), or save with fmt='safetensors' or fmt=None to load back.")


def _read_export(path: str, fmt: str, read: Callable[[str], Any]) -> Any:
    """``read(path)``; a ``ModelFileError`` naming the file when it is truncated or corrupt."""
    try:
        return read(path)
    except Exception as error:  # each library raises its own types for a damaged file
        raise ModelFileError(f"Expected a complete {fmt} file. Received: {path!r}, which cannot be read "
                             f"({type(error).__name__}: {error}); it is truncated or corrupt. Save (export) the "
                             "model again.") from error


def load(model: 'TorchModel', path: str, fmt: str | None = None, trusted: bool = False) -> None:
    """Load into ``model`` a file of ``save``: flowpipe's own (the whole state, by ``io``), an export's metadata
    file or an exported file (the weights of the file)."""
    fmt = file_format(path, fmt)
    if fmt is None:
        contents = io.read(path, formats=(io.FORMAT, META_FORMAT), trusted=trusted)
        if model.engine is None:
            io.build_from(model, contents)
        if contents['format'] == io.FORMAT:
            io.load_into(model, contents)
            return
        path, fmt = _exported(path, contents)
    engine = model._built()
    try:
        engine.load_state_dict(_state_dict(path, fmt, trusted))
    except RuntimeError as error:
        raise ModelFileError(f"Expected a {fmt} file of the same network as {type(model).__name__}. Received "
                             f"{path!r}, whose weights do not fit: {error}") from error
    engine.sync()


class ExportedModule(torch.nn.Module):
    """The module of a ``torch.export`` file: its graph was traced in evaluation mode and keeps it, so ``train()``
    and ``eval()`` only set the flag (the graph module itself refuses them)."""

    def __init__(self, graph: torch.nn.Module):
        super().__init__()
        self.graph = graph

    def forward(self, *inputs: Any) -> Any:
        return self.graph(*inputs)

    def train(self, mode: bool = True) -> 'ExportedModule':
        self.training = mode
        return self


def _no_loss(*args: Any) -> torch.Tensor:
    raise ValueError("Expected a loss to compute: this model was loaded from a bare TorchScript or torch.export file, "
                     "which holds no config. Received: no 'loss'. Give it: TorchModel.from_file(path, loss='ce').")


def from_file(path: str, model_class: type | None, fmt: str | None = None, trusted: bool = False,
              **overrides: Any) -> 'TorchModel':
    """A new model from a file of ``save``: flowpipe's own (by ``io``), an export's metadata file (its class and
    config, the exported weights) or a bare TorchScript/``.pt2`` file (a ``TorchModel`` around its module)."""
    from .model import TorchModel
    fmt = file_format(path, fmt)
    if fmt is None:
        contents = io.read(path, formats=(io.FORMAT, META_FORMAT), trusted=trusted)
        if contents['format'] == io.FORMAT:
            return io.from_payload(contents, model_class, **overrides)
        config = dict(contents['config'])
        if contents.get('module') is not None:
            config['model'] = contents['module']
        cls = io.class_of(contents, model_class)
        io.check_class(cls, contents['model_class'])
        model = cls(config, **overrides)
        load(model, path, trusted=trusted)
        model.iteration = contents.get('iteration', 0)
        return model
    if fmt in ('torchscript', 'export'):
        _check_program(path, fmt, trusted)
        module = (_read_export(path, fmt, lambda at: torch.jit.load(at, map_location='cpu')) if fmt == 'torchscript'
                  else ExportedModule(_read_export(path, fmt, torch.export.load).module()))
        return (model_class or TorchModel)({'model': module, 'loss': _no_loss}, **overrides)
    if fmt == 'onnx':
        _state_dict(path, fmt, trusted)          # raises: ONNX does not load back
    raise ValueError(f"Expected a file that says which network to build. Received: {path!r}, bare {fmt} weights "
                     "with no config. Make the model from its config, then model.load(path); or save with "
                     "pickle_metadata=True and load the metadata file.")
