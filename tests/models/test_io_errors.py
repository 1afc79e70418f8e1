"""A model file of another network, or a damaged exported file, is named with the fix, not a network build
error or a library's bare exception."""
import pytest

from flowpipe import ModelFileError
from flowpipe.models.torch import MLP, SimpleCNN, TorchModel

CONFIG = {'inputs/x/shape': (4,), 'inputs/y/classes': 3, 'initial_block/inputs': 'x', 'body/units': (8,)}


@pytest.mark.parametrize('fmt, name', [(None, 'mlp.model'), ('safetensors', 'mlp.pkl')])
def test_a_file_of_another_network_names_the_file_s_class(tmp_path, fmt, name):
    MLP(CONFIG).save(tmp_path / name, fmt=fmt)
    with pytest.raises(ModelFileError, match=r"Expected a file of SimpleCNN \(or a class related to it\)\. Received: "
                                             r"a file of flowpipe\.models\.torch\.ready\.MLP\. Load it with "
                                             r"MLP\.from_file\(path\)"):
        SimpleCNN.from_file(tmp_path / name)
    assert isinstance(TorchModel.from_file(tmp_path / name), MLP)     # the file's own class, or a base of it


class WiderMLP(MLP):
    """A subclass: a file of MLP loads into it."""


def test_a_subclass_loads_its_base_s_file(tmp_path):
    MLP(CONFIG).save(tmp_path / 'mlp.model')
    assert type(WiderMLP.from_file(tmp_path / 'mlp.model')) is WiderMLP


@pytest.mark.parametrize('fmt, exported', [('safetensors', 'net.safetensors'), ('torchscript', 'net.torchscript.pt')])
def test_a_truncated_exported_file_is_named_as_damaged(tmp_path, fmt, exported):
    if fmt == 'safetensors':
        pytest.importorskip('safetensors')
    model = MLP(CONFIG)
    model.save(tmp_path / 'net.pkl', fmt=fmt)
    whole = (tmp_path / exported).read_bytes()
    (tmp_path / exported).write_bytes(whole[:len(whole) // 2])
    message = rf"Expected a complete {fmt} file\. Received: .*{exported}.*truncated or corrupt\. Save \(export\)"
    trusted = fmt == 'torchscript'             # a program: opened only when trusted
    with pytest.raises(ModelFileError, match=message):
        MLP.from_file(tmp_path / 'net.pkl', trusted=trusted)
    with pytest.raises(ModelFileError, match=message):
        model.load(tmp_path / exported, trusted=trusted)


def test_a_full_disk_under_model_checkpoint_names_the_model_file(tmp_path, monkeypatch):
    import errno
    import os

    import numpy as np

    from flowpipe import B, Dataset, Pipeline
    from flowpipe.callbacks import ModelCheckpoint
    dataset = Dataset(8, preloaded={'x': np.ones((8, 4)), 'y': np.arange(8) % 3})
    train = (Pipeline().init_model('net', MLP, config=CONFIG).train_model('net', x=B.x, y=B.y)) << dataset

    from flowpipe import safe_pickle

    def full(value, file, *args):
        file.write(b'the part that fitted')
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(safe_pickle, 'dump', full)
    with pytest.raises(OSError) as caught:
        train.run(4, n_epochs=1, callbacks=[ModelCheckpoint(tmp_path / 'best', monitor='train/loss')])
    assert caught.value.errno == errno.ENOSPC
    note = '\n'.join(caught.value.__notes__)
    assert f"Expected to write the model file {str(tmp_path / 'best' / 'epoch-0000.model')!r}" in note
    assert 'No space left on device' in note and 'no file was left' in note and 'then save again' in note
    assert os.listdir(tmp_path / 'best') == ['.modelcheckpoint.json']   # the run's ledger only: no model file
    train.m('net').close()
