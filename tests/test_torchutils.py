"""flowpipe.torchutils: the torch helpers every layer shares, defined once below all of them."""
import ast
import pathlib

import numpy as np
import pytest
import torch

import flowpipe
from flowpipe import torchutils
from flowpipe.parallel import MixedPrecision, Precision, precision
from flowpipe.parallel.engines import base, cuda, distributed

ROOT = pathlib.Path(flowpipe.__file__).parent


def test_to_tensor_shares_memory_and_copies_what_torch_cannot_take():
    array = np.arange(6, dtype=np.float32)
    assert torchutils.to_tensor(array, 'x').data_ptr() == array.__array_interface__['data'][0]
    assert torch.equal(torchutils.to_tensor(array[::-1], 'x'), torch.arange(5, -1, -1, dtype=torch.float32))


def test_text_labels_get_an_error_naming_the_input_and_the_fix():
    with pytest.raises(TypeError, match=r"'labels'.*dtype <U3.*'cat'.*np\.unique.*inputs/labels/classes"):
        torchutils.to_tensor(np.array(['cat', 'dog']), 'labels')


def test_the_engines_share_one_do_nothing_context():
    for module in (base, distributed, cuda, precision):
        assert not hasattr(module, '_NO_CONTEXT')
    assert Precision().autocast(torch.device('cpu')) is torchutils.NO_CONTEXT
    assert cuda.device_context(torch.device('cpu')) is torchutils.NO_CONTEXT


def test_batch_device_imports_no_model_module():
    tree = ast.parse((ROOT / 'batch' / 'device.py').read_text())
    imported = [node.module or '' for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if 'models' in name]
    assert 'torchutils' in imported


def test_precision_state_is_named_like_the_execution_nodes():
    for cls in (Precision, MixedPrecision):
        assert callable(cls.state) and callable(cls.load_state)
        assert not hasattr(cls, 'state_dict') and not hasattr(cls, 'load_state_dict')
    assert Precision().state() == {}
