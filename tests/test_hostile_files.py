"""Hostile files fed to every reader of flowpipe's files: model files (``from_file``, ``load``, ``load_model``),
run checkpoints (``resume=True``), a research's records and definition. Each file is refused with
``UnsafeFileError`` before anything in the process changes: no code runs (no mark file), no builtin is replaced,
no module the file names is imported, whether the file is a bare pickle or a ``torch.save`` zip.

The payloads: the builtins-tampering and code-running files of the issue this guards (``numpy.dtypes.__builtins__``
then ``torch.fx``'s ``exec``), ``__reduce__`` gadgets of the standard library, torch, numpy and dill, a protocol-4
lookup a disassembly cannot name, and payloads built by the pickle-attack tool ``fickling`` (a test extra).
"""
import builtins
import io
import os
import pickle
import pickletools
import struct
import sys
import zipfile

import dill
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe import B, Checkpoint, Dataset, Pipeline, UnsafeFileError
from flowpipe.models.torch import MLP, TorchModel
from flowpipe.research import Research, ResearchResults
from flowpipe.research import storage as research_storage

from .test_safe_pickle import Marking

X, Y = np.random.default_rng(0).normal(size=(12, 4)), np.arange(12) % 3
CONFIG = {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (8,)}


# ----- the opcodes of a protocol-2 pickle, written by hand -----

def glob(module, name):
    return b'c' + module.encode() + b'\n' + name.encode() + b'\n'


def text(value):
    data = value.encode()
    return b'X' + struct.pack('<I', len(data)) + data


def call(function, *args):
    return function + b'(' + b''.join(args) + b'tR'


def program(*parts):
    return b'\x80\x02' + b''.join(parts) + b'.'


def _builtins_replaced(mark):
    # the builtins dict reached through a module that imports numpy: sorted becomes slice
    return program(glob('numpy.dtypes', '__builtins__'), text('sorted'), glob('builtins', 'slice'), b's')


def _fx_exec(mark):
    # isinstance disabled, then torch.fx compiles and runs the file's source
    source = f"open({mark!r}, 'w').close()\ndef forward(self):\n    return None\n"
    return program(glob('numpy.dtypes', '__builtins__'), text('isinstance'), glob('builtins', 'slice'), b's0',
                   call(glob('torch.fx.graph_module', '_forward_from_src'), text(source), b'}'))


def _reduce(module, name, *args):
    return lambda mark: program(call(glob(module, name), *(text(arg.format(mark=mark)) for arg in args)))


def _numpy_load(mark):
    # numpy.load(path, None, True) on an object array whose pickle runs code
    path = mark + '.npy'
    with open(path, 'wb') as file:
        np.lib.format.write_array(file, np.array([Marking(mark)], dtype=object), allow_pickle=True)
    return program(call(glob('numpy', 'load'), text(path), b'N', b'\x88'))


def _loads(module):
    def payload(mark):
        raw = dill.dumps(Marking(mark))
        return program(call(glob(module, 'loads'), b'B' + struct.pack('<I', len(raw)) + raw))
    return payload


def _stack_global(mark):
    return pickle.dumps(Marking(mark), protocol=4)


def _fickling_exec(mark):
    fickle = pytest.importorskip('fickling.fickle')
    pickled = fickle.Pickled.load(pickle.dumps({'format': 'flowpipe-model'}, protocol=2))
    pickled.insert_python_exec(f"open({mark!r}, 'w').close()", run_first=True)
    return pickled.dumps()


PAYLOADS = {
    'builtins replaced through numpy.dtypes': _builtins_replaced,
    'isinstance replaced, then torch.fx exec': _fx_exec,
    'builtins in torch.nn.functional': lambda mark: program(glob('torch.nn.functional', '__builtins__'),
                                                            text('len'), glob('builtins', 'slice'), b's'),
    'os.system': _reduce('os', 'system', 'touch {mark}'),
    'posix.system': _reduce('posix', 'system', 'touch {mark}'),
    'builtins.exec': _reduce('builtins', 'exec', "open({mark!r}, 'w').close()"),
    'builtins.eval': _reduce('builtins', 'eval', "open({mark!r}, 'w')"),
    '__builtin__.eval (protocol-2 names)': _reduce('__builtin__', 'eval', "open({mark!r}, 'w')"),
    'builtins.__import__': _reduce('builtins', '__import__', 'tests.hostile_canary'),
    'importlib.import_module': _reduce('importlib', 'import_module', 'tests.hostile_canary'),
    'a module imported by name': _reduce('tests.hostile_canary', 'anything', '{mark}'),
    'subprocess.getoutput': _reduce('subprocess', 'getoutput', 'touch {mark}'),
    'timeit.timeit': _reduce('timeit', 'timeit', "open({mark!r}, 'w')"),
    'runpy.run_path': _reduce('runpy', 'run_path', '{mark}.py'),
    'shutil.rmtree': _reduce('shutil', 'rmtree', '{mark}.folder'),
    'torch.load': _reduce('torch', 'load', '{mark}.pt'),
    'torch.serialization.load': _reduce('torch.serialization', 'load', '{mark}.pt'),
    'torch.hub.load': _reduce('torch.hub', 'load', '{mark}', 'model'),
    'torch.jit.load': _reduce('torch.jit', 'load', '{mark}.pt'),
    'torch.storage._load_from_bytes': _reduce('torch.storage', '_load_from_bytes', '{mark}'),
    'numpy.load with pickles': _numpy_load,
    'numpy.testing runstring': _reduce('numpy.testing._private.utils', 'runstring', "open({mark!r}, 'w')", ''),
    'dill.loads': _loads('dill'),
    'pickle.loads': _loads('pickle'),
    'dill by value': lambda mark: dill.dumps(Marking(mark), byref=False, recurse=True),
    'STACK_GLOBAL (protocol 4)': _stack_global,
    'fickling exec': _fickling_exec,
}


def _genuine_zip(tmp_path):
    model = MLP(CONFIG)
    model.train(X, Y)
    model.save(tmp_path / 'genuine.model')
    return (tmp_path / 'genuine.model').read_bytes()


def _in_zip(genuine, data):
    """A torch.save zip (a real model file's) whose pickle is ``data``."""
    source, target = zipfile.ZipFile(io.BytesIO(genuine)), io.BytesIO()
    with zipfile.ZipFile(target, 'w', zipfile.ZIP_STORED) as archive:
        for info in source.infolist():
            archive.writestr(info.filename, data if info.filename.endswith('/data.pkl') else source.read(info))
    return target.getvalue()


def _modules_named(data):
    """The modules of the globals a pickle names (its GLOBAL opcodes and the strings before a STACK_GLOBAL)."""
    modules, strings = set(), []
    try:
        for opcode, argument, _ in pickletools.genops(data):
            if opcode.name == 'GLOBAL':
                modules.add(argument.split(' ')[0])
            elif opcode.name == 'STACK_GLOBAL' and strings:
                modules.add(strings[0])
            if isinstance(argument, str):
                strings = [*strings[-1:], argument]
    except ValueError:
        pass
    return modules


class Untouched:
    """The state a refused file must leave as it was: builtins, the modules the file names, the mark."""

    def __init__(self, mark, data):
        self.mark = mark
        self.builtins = dict(vars(builtins))
        self.absent = {module for module in _modules_named(data) if module not in sys.modules}
        os.environ['HOSTILE_CANARY'] = mark + '.imported'

    def check(self):
        now = vars(builtins)
        changed = sorted(key for key in set(now) | set(self.builtins) if now.get(key) is not self.builtins.get(key))
        for key in changed:             # undo, so that one failure does not break the other tests
            if key in self.builtins:
                setattr(builtins, key, self.builtins[key])
        os.environ.pop('HOSTILE_CANARY', None)
        assert not changed, f'builtins changed: {changed}'
        assert not os.path.exists(self.mark), 'the file ran code'
        assert not os.path.exists(self.mark + '.imported'), 'a module the file names was imported'
        assert not self.absent & set(sys.modules), f'imported: {sorted(self.absent & set(sys.modules))}'


def _hostile(tmp_path, payload, container):
    mark = str(tmp_path / 'mark')
    data = PAYLOADS[payload](mark)
    return mark, data, (data if container == 'bare' else _in_zip(_genuine_zip(tmp_path), data))


def _refused(open_it, mark, data):
    untouched = Untouched(mark, data)
    try:
        with pytest.raises(UnsafeFileError, match='Expected .* that loads without running code'):
            open_it()
    finally:
        untouched.check()


MODEL_READERS = {
    'from_file': lambda path: TorchModel.from_file(path),
    'class from_file': lambda path: MLP.from_file(path),
    'load': lambda path: MLP(CONFIG).load(path),
    'load_model': lambda path: Pipeline().load_model_now('net', path=path),
}


@pytest.mark.parametrize('container', ['bare', 'zip'])
@pytest.mark.parametrize('payload', PAYLOADS)
def test_a_hostile_model_file_is_refused_before_anything_changes(tmp_path, payload, container):
    mark, data, contents = _hostile(tmp_path, payload, container)
    (tmp_path / 'hostile.model').write_bytes(contents)
    _refused(lambda: TorchModel.from_file(tmp_path / 'hostile.model'), mark, data)


@pytest.mark.parametrize('reader', MODEL_READERS)
@pytest.mark.parametrize('payload', ['builtins replaced through numpy.dtypes', 'isinstance replaced, then torch.fx exec',
                                     'os.system', 'fickling exec'])
def test_every_model_reader_refuses_them(tmp_path, payload, reader):
    mark, data, contents = _hostile(tmp_path, payload, 'zip')
    (tmp_path / 'hostile.model').write_bytes(contents)
    _refused(lambda: MODEL_READERS[reader](tmp_path / 'hostile.model'), mark, data)


def _resuming(folder):
    data = Dataset(12, preloaded={'x': X, 'y': Y})
    pipeline = Pipeline().init_model('net', MLP, config=CONFIG).train_model('net', x=B.x, y=B.y) << data
    return lambda: pipeline.run(4, n_epochs=1, checkpoint=Checkpoint(folder), resume=True)


@pytest.mark.parametrize('container', ['bare', 'zip'])
@pytest.mark.parametrize('payload', ['builtins replaced through numpy.dtypes', 'isinstance replaced, then torch.fx exec',
                                     'builtins.exec', 'dill by value', 'fickling exec'])
def test_a_hostile_run_checkpoint_is_refused_before_anything_changes(tmp_path, payload, container):
    mark, data, contents = _hostile(tmp_path, payload, container)
    (tmp_path / 'ckpt').mkdir()
    (tmp_path / 'ckpt' / 'checkpoint-000000002.flowpipe').write_bytes(contents)
    _refused(_resuming(tmp_path / 'ckpt'), mark, data)


@pytest.mark.parametrize('container', ['bare', 'zip'])
@pytest.mark.parametrize('payload', ['builtins replaced through numpy.dtypes', 'isinstance replaced, then torch.fx exec',
                                     'pickle.loads', 'fickling exec'])
def test_a_research_s_hostile_record_or_definition_is_refused_before_anything_changes(tmp_path, monkeypatch,
                                                                                        payload, container):
    monkeypatch.setattr(research_storage, '_WRITTEN', set())
    mark, data, contents = _hostile(tmp_path, payload, container)
    name = tmp_path / 'research'
    (name / 'experiments' / 'x').mkdir(parents=True)
    (name / 'experiments' / 'x' / 'record.dill').write_bytes(contents)
    _refused(lambda: ResearchResults(str(name)).rows(), mark, data)
    (name / 'experiments' / 'x' / 'record.dill').unlink()
    (name / 'research.dill').write_bytes(contents)
    _refused(lambda: Research.load(str(name)), mark, data)


def test_fickling_s_injection_into_a_real_model_file_is_refused(tmp_path):
    wrapper = pytest.importorskip('fickling.pytorch')
    _genuine_zip(tmp_path)
    mark = str(tmp_path / 'mark')
    for injection in ('insertion', 'combination'):
        target = tmp_path / f'{injection}.model'
        try:
            wrapper.PyTorchModelWrapper(tmp_path / 'genuine.model').inject_payload(
                f"open({mark!r}, 'w').close()", target, injection=injection)
        except Exception as error:      # noqa: BLE001 - a mode this fickling cannot apply to the file
            pytest.skip(f'fickling cannot inject by {injection}: {error}')
        _refused(lambda: TorchModel.from_file(target), mark, target.read_bytes())


def test_a_file_written_by_torch_save_of_a_hostile_object_is_refused(tmp_path):
    mark = str(tmp_path / 'mark')
    torch.save({'format': 'flowpipe-model', 'state': Marking(mark)}, tmp_path / 'saved.model')
    _refused(lambda: TorchModel.from_file(tmp_path / 'saved.model'), mark, b'')
    with pytest.raises(Exception):          # trusted: the file's code runs (and returns no model)
        TorchModel.from_file(tmp_path / 'saved.model', trusted=True)
    assert os.path.exists(mark)


def test_the_refusal_names_what_the_file_names_and_the_fix(tmp_path):
    mark, data, contents = _hostile(tmp_path, 'isinstance replaced, then torch.fx exec', 'zip')
    (tmp_path / 'hostile.model').write_bytes(contents)
    with pytest.raises(UnsafeFileError, match=r"hostile\.model.*numpy\.dtypes\.__builtins__.*trusted=True"):
        TorchModel.from_file(tmp_path / 'hostile.model')
    (tmp_path / 'bare.model').write_bytes(data)
    with pytest.raises(UnsafeFileError, match=r"bare pickle format.*numpy\.dtypes\.__builtins__.*trusted=True.*"
                                              r"saving it again writes the current format"):
        TorchModel.from_file(tmp_path / 'bare.model')


def test_a_model_callback_writing_to_a_path_the_file_names_is_refused(tmp_path):
    from flowpipe.models.torch.callbacks import LogCallback
    target = tmp_path / 'bashrc'
    target.write_text('kept\n')
    model = MLP({**CONFIG, 'callbacks': [LogCallback(stream=str(target))]})
    model.save(tmp_path / 'logging.model')
    with pytest.raises(UnsafeFileError, match=r"LogCallback writes to the file .*bashrc.*trusted=True"):
        MLP.from_file(tmp_path / 'logging.model')
    assert target.read_text() == 'kept\n'
    MLP.from_file(tmp_path / 'logging.model', trusted=True)


def test_a_program_file_is_opened_only_when_trusted(tmp_path):
    model = MLP(CONFIG)
    model.train(X, Y)
    model.save(tmp_path / 'net.torchscript.pt', fmt='torchscript', pickle_metadata=False)
    with pytest.raises(UnsafeFileError, match='a torchscript file: a program'):
        MLP(CONFIG).load(tmp_path / 'net.torchscript.pt')
    with pytest.raises(UnsafeFileError, match='a torchscript file: a program'):
        TorchModel.from_file(tmp_path / 'net.torchscript.pt')
    loaded = MLP(CONFIG).load(tmp_path / 'net.torchscript.pt', trusted=True)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_flowpipe_s_own_files_in_the_new_format_are_torch_zips_read_by_torch_s_restricted_reader(tmp_path):
    from flowpipe import safe_pickle
    model = TorchModel({'model': nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3)), 'loss': 'ce',
                        'optimizer': torch.optim.AdamW})
    model.train(X, Y)
    model.save(tmp_path / 'ready.model')
    assert zipfile.is_zipfile(tmp_path / 'ready.model')
    with open(tmp_path / 'ready.model', 'rb') as file:
        named = set(safe_pickle.names_in(safe_pickle._pickle_of(file)))
    assert named <= set(safe_pickle.allowed_names())
    assert {'torch.nn.modules.linear.Linear', 'torch.optim.adamw.AdamW'} <= named
    assert not any('dill' in name for name in named)
    np.testing.assert_array_equal(TorchModel.from_file(tmp_path / 'ready.model').predict(X), model.predict(X))


def _shards(tmp_path):
    from flowpipe.parallel import sharded_state
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    folder = str(tmp_path / 'checkpoint-000000004.shards')
    sharded_state.save_shards(folder, {'net': sharded_state.sharded_state(net, optimizer)})
    return folder, {'net': sharded_state.sharded_state(net, optimizer)}


def _class_state(mark):
    # state set on a class the table holds (the full unpickler would assign its attributes)
    return program(glob('torch.distributed.checkpoint.metadata', 'Metadata'), b'N}' + text('state_dict_metadata')
                   + text(mark) + b's\x86b')


@pytest.mark.parametrize('payload', ['builtins replaced through numpy.dtypes', 'isinstance replaced, then torch.fx exec',
                                     'os.system', 'builtins.exec', 'dill by value', 'STACK_GLOBAL (protocol 4)',
                                     'fickling exec', 'state set on a class'])
def test_a_hostile_shards_metadata_is_refused_before_anything_changes(tmp_path, payload):
    """DCP reads a folder's .metadata with Python's full unpickler: flowpipe reads it by an exact table first."""
    from flowpipe.parallel import sharded_state
    folder, states = _shards(tmp_path)
    mark = str(tmp_path / 'mark')
    data = (_class_state if payload == 'state set on a class' else PAYLOADS[payload])(mark)
    with open(os.path.join(folder, '.metadata'), 'wb') as file:
        file.write(data)
    import torch.distributed.checkpoint.metadata as dcp_metadata
    before = dict(vars(dcp_metadata.Metadata))
    _refused(lambda: sharded_state.load_shards(folder, states), mark, data)
    assert dict(vars(dcp_metadata.Metadata)) == before


def test_a_genuine_folder_of_shards_loads_by_the_table(tmp_path):
    from flowpipe.parallel import sharded_state
    folder, states = _shards(tmp_path)
    reader = sharded_state.metadata_reader(folder)
    assert type(reader.read_metadata()).__name__ == 'Metadata'
    sharded_state.load_shards(folder, states)
    sharded_state.load_shards(folder, states, trusted=True)
