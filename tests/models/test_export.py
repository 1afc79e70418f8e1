"""save(path, fmt=...): ONNX, safetensors, TorchScript and torch.export files, and loading back what loads back."""
import os
import sys

import numpy as np
import pytest
import torch

from flowpipe.errors import ModelFileError, UnsafeFileError
from flowpipe.models.torch import MLP, SimpleCNN, TorchModel

# torch's ONNX exporter warns of its own use of a deprecated torch name
pytestmark = pytest.mark.filterwarnings('ignore:`isinstance.treespec:FutureWarning')
CONFIG = {'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 3, 'initial_block/inputs': 'images',
          'body/filters': (4, 8)}


def _trained(cls=SimpleCNN, **overrides):
    torch.manual_seed(0)
    model = cls({**CONFIG, **overrides})
    rng = np.random.default_rng(0)
    for _ in range(2):
        model.train(images=rng.random((6, 1, 8, 8), dtype='float32'), labels=rng.integers(0, 3, 6))
    return model


def _images(count=5):
    return np.random.default_rng(1).random((count, 1, 8, 8), dtype='float32')


def test_onnx_passes_the_checker_and_predicts_what_the_model_predicts(tmp_path):
    onnx = pytest.importorskip('onnx')
    pytest.importorskip('onnxscript')
    model = _trained()
    model.save(tmp_path / 'net.pkl', fmt='onnx')
    onnx.checker.check_model(onnx.load(tmp_path / 'net.onnx'))
    ort = pytest.importorskip('onnxruntime')
    session = ort.InferenceSession(str(tmp_path / 'net.onnx'), providers=['CPUExecutionProvider'])
    assert [item.name for item in session.get_inputs()] == ['images']
    for count in (5, 2):                                # the batch dimension is dynamic
        images = _images(count)
        np.testing.assert_allclose(session.run(None, {'images': images})[0], model.predict(images=images),
                                   rtol=1e-5, atol=1e-5)


def test_onnx_with_a_fixed_batch_size_and_an_unreachable_opset(tmp_path):
    onnx = pytest.importorskip('onnx')
    pytest.importorskip('onnxscript')
    model = _trained()
    model.save(tmp_path / 'fixed.onnx', fmt='onnx', batch_size=4, pickle_metadata=False)
    graph = onnx.load(tmp_path / 'fixed.onnx').graph
    assert graph.input[0].type.tensor_type.shape.dim[0].dim_value == 4
    assert sorted(os.listdir(tmp_path)) == ['fixed.onnx']
    with pytest.raises(ValueError, match='opset 13.*opset_version=None'):
        model.save(tmp_path / 'old.onnx', fmt='onnx', opset_version=13, pickle_metadata=False)
    with pytest.raises(ValueError, match='does not load back|ONNX'):
        model.load(tmp_path / 'fixed.onnx')


def test_safetensors_round_trips_exactly(tmp_path):
    pytest.importorskip('safetensors')
    model = _trained()
    model.save(tmp_path / 'net.pkl', fmt='safetensors')
    assert sorted(os.listdir(tmp_path)) == ['net.pkl', 'net.safetensors']
    restored = SimpleCNN.from_file(tmp_path / 'net.pkl')
    original = model.model.state_dict()
    assert all(torch.equal(value, original[key]) for key, value in restored.model.state_dict().items())
    assert restored.iteration == 2
    np.testing.assert_array_equal(restored.predict(images=_images()), model.predict(images=_images()))
    fresh = SimpleCNN(CONFIG)                           # batchflow's way: a model with its config loads the file
    fresh.load(tmp_path / 'net.safetensors')
    np.testing.assert_array_equal(fresh.predict(images=_images()), model.predict(images=_images()))
    with pytest.raises(ValueError, match='bare safetensors weights.*model.load'):
        SimpleCNN.from_file(tmp_path / 'net.safetensors')
    with pytest.raises(ModelFileError, match='weights do not fit'):
        MLP({**CONFIG, 'body/filters': None}).load(tmp_path / 'net.safetensors')


@pytest.mark.filterwarnings('ignore:`torch.jit:DeprecationWarning')
@pytest.mark.parametrize('fmt, extension', [('torchscript', '.torchscript.pt'), ('export', '.pt2')])
def test_torchscript_and_export_files_run_and_match(tmp_path, fmt, extension):
    model = _trained()
    model.save(tmp_path / 'net.pkl', fmt=fmt)
    loaded = torch.jit.load(tmp_path / f'net{extension}') if fmt == 'torchscript' else \
        torch.export.load(tmp_path / f'net{extension}').module()
    images = _images()
    np.testing.assert_allclose(loaded(torch.from_numpy(images)).detach().numpy(), model.predict(images=images),
                               rtol=1e-6, atol=1e-6)
    with pytest.raises(UnsafeFileError, match=f'a {fmt} file: a program'):     # opened only when trusted
        SimpleCNN.from_file(tmp_path / 'net.pkl')
    restored = SimpleCNN.from_file(tmp_path / 'net.pkl', trusted=True)     # the metadata file: class, config, weights
    np.testing.assert_array_equal(restored.predict(images=images), model.predict(images=images))
    bare = TorchModel.from_file(tmp_path / f'net{extension}', trusted=True)    # a model around the loaded module
    np.testing.assert_allclose(bare.predict(inputs=images), model.predict(images=images), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="no 'loss'.*from_file"):
        bare.train(inputs=images, targets=np.zeros(5, 'int64'))


def test_a_float64_model_exports_in_float64(tmp_path):
    model = _trained(MLP, dtype='float64', **{'body/filters': None})
    model.save(tmp_path / 'net.pt2', fmt='export', pickle_metadata=False)
    loaded = torch.export.load(tmp_path / 'net.pt2').module()
    images = torch.from_numpy(_images()).double()
    np.testing.assert_allclose(loaded(images).detach().numpy(), model.predict(images=images), rtol=1e-12)


def test_bad_arguments_name_the_fix(tmp_path):
    model = _trained()
    with pytest.raises(ValueError, match="fmt as None.*'onnx'"):
        model.save(tmp_path / 'net.x', fmt='openvino')
    with pytest.raises(ValueError, match="without '.safetensors'"):
        model.save(tmp_path / 'net.safetensors', fmt='safetensors')
    with pytest.raises(ValueError, match='ignore_attributes'):
        model.save(tmp_path / 'net.pkl', ignore_attributes=('optimizer',))
    with pytest.raises(ValueError, match="fmt=None.*batch_size"):
        model.save(tmp_path / 'net.pkl', batch_size=4)
    with pytest.raises(ValueError, match='pickle_module=None, dill or pickle'):
        model.save(tmp_path / 'net.pkl', pickle_module=__import__('json'))
    with pytest.raises(ValueError, match="opset_version only with fmt='onnx'"):
        model.save(tmp_path / 'net.pkl', fmt='export', opset_version=18)
    with pytest.raises(ValueError, match="jit='trace' or 'script'"):
        model.save(tmp_path / 'net.pkl', fmt='torchscript', jit='compile')
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize('fmt, module', [('safetensors', 'safetensors'), ('onnx', 'onnx'), ('onnx', 'onnxscript')])
def test_a_missing_package_names_the_extra(tmp_path, monkeypatch, fmt, module):
    for name in [name for name in sys.modules if name == module or name.startswith(module + '.')]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)          # `import module` now raises ImportError
    with pytest.raises(ImportError, match=rf"'{module}' package.*pip install 'flowpipe\[export\]'"):
        _trained().save(tmp_path / 'net.pkl', fmt=fmt)


@pytest.mark.filterwarnings('ignore:`torch.jit:DeprecationWarning')
def test_replicas_export_their_primary_and_a_bare_file_loads_by_fmt(tmp_path):
    pytest.importorskip('safetensors')
    with _trained(device='CPU:0x2', batch_norm=False) as model:       # close() stops the replica threads
        model.save(tmp_path / 'net.ts', fmt='torchscript', pickle_metadata=False)
        model.save(tmp_path / 'weights.bin', fmt='safetensors', pickle_metadata=False)
        images = _images(6)
        expected = model.predict(images=images)
    for path, fmt in ((tmp_path / 'net.ts', 'torchscript'), (tmp_path / 'weights.bin', 'safetensors')):
        fresh = SimpleCNN({**CONFIG, 'batch_norm': False}).load(path, fmt=fmt, trusted=fmt == 'torchscript')
        np.testing.assert_allclose(fresh.predict(images=images), expected, rtol=1e-6, atol=1e-7)


def test_batchflow_load_forms_pt_and_pickle_module(tmp_path):
    import pickle

    import dill
    pytest.importorskip('safetensors')
    model = _trained()
    model.save(tmp_path / 'own.pkl')
    model.save(tmp_path / 'meta.pkl', fmt='safetensors')
    model.save(tmp_path / 'plain.pkl', pickle_module=pickle)
    model.save(tmp_path / 'plain_meta.pkl', fmt='safetensors', pickle_module=pickle)
    for name in ['plain.pkl', 'plain_meta.pkl']:        # torch.save zips by pickle's pickler, as batchflow's are
        assert isinstance(torch.load(tmp_path / name, weights_only=False, pickle_module=pickle), dict)
    for name in ['own.pkl', 'meta.pkl', 'plain.pkl', 'plain_meta.pkl']:   # batchflow's fmt='pt': a file of save
        for pickle_module in [None, dill, pickle]:
            fresh = SimpleCNN(CONFIG).load(tmp_path / name, fmt='pt', pickle_module=pickle_module)
            np.testing.assert_array_equal(fresh.predict(images=_images()), model.predict(images=_images()))
    for name in ['own.pkl', 'meta.pkl']:                # a model without a shape is built by the file's config
        state = torch.random.get_rng_state()
        bare = SimpleCNN({'loss': 'mse'}).load(tmp_path / name)
        assert torch.equal(torch.random.get_rng_state(), state)
        assert bare.spec.get('loss') == 'mse' and bare.config['inputs']['images']['shape'] == (1, 8, 8)
        np.testing.assert_array_equal(bare.predict(images=_images()), model.predict(images=_images()))
    with pytest.raises(ModelFileError, match='Load it with SimpleCNN'):
        MLP().load(tmp_path / 'own.pkl')
    with pytest.raises(ValueError, match='pickle_module=None, dill or pickle'):
        SimpleCNN(CONFIG).load(tmp_path / 'own.pkl', pickle_module=__import__('json'))
    with pytest.raises(ValueError, match=r"fmt as None \('pt'\)"):
        SimpleCNN(CONFIG).load(tmp_path / 'own.pkl', fmt='openvino')
