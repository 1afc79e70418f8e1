"""The pieces of scripts/batchflow_compat.sh: scripts/batchflow_alias.py (`import batchflow.x` loads flowpipe.x), the
shim that gives the alias to new processes, and the generated stand-in of CIFAR-10's archive."""
import importlib.util
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).parents[1]
SCRIPT = ROOT / 'scripts' / 'batchflow_alias.py'


@pytest.fixture
def alias():
    spec = importlib.util.spec_from_file_location('batchflow_alias_under_test', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, module.AliasFinder)]
    for name in [name for name in sys.modules if name == 'batchflow' or name.startswith('batchflow.')]:
        del sys.modules[name]


def test_batchflow_modules_are_flowpipe_modules(alias):
    import flowpipe
    import flowpipe.data.index
    import batchflow
    from batchflow import Config, DatasetIndex
    from batchflow.data import index
    assert batchflow is flowpipe and Config is flowpipe.Config and DatasetIndex is flowpipe.DatasetIndex
    assert index is flowpipe.data.index
    assert flowpipe.__spec__.name == 'flowpipe' and index.__spec__.name == 'flowpipe.data.index'
    alias.install()
    assert sum(isinstance(finder, alias.AliasFinder) for finder in sys.meta_path) == 1


def test_missing_module_is_a_module_not_found_error(alias):
    with pytest.raises(ModuleNotFoundError, match='flowpipe.utils_telegram'):
        import batchflow.utils_telegram  # noqa: F401


def test_a_new_process_with_the_shim_on_its_path_imports_batchflow_as_flowpipe(tmp_path):
    # what Research's worker processes do in scripts/batchflow_compat.sh: import the test module, which imports
    # batchflow
    (tmp_path / 'uses_batchflow.py').write_text('from batchflow import Pipeline\n'
                                                'from batchflow.models.torch import ResNet\n')
    code = ('import flowpipe, flowpipe.models.torch, uses_batchflow, batchflow, batchflow.research\n'
            'assert batchflow is flowpipe and batchflow.research is flowpipe.research\n'
            'assert uses_batchflow.Pipeline is flowpipe.Pipeline\n'
            'assert uses_batchflow.ResNet is flowpipe.models.torch.ResNet\n'
            'print(batchflow.__spec__.name)')
    path = os.pathsep.join(map(str, [tmp_path, ROOT, ROOT / 'scripts' / 'batchflow_shim', ROOT / 'scripts']))
    result = subprocess.run([sys.executable, '-c', code], env={**os.environ, 'PYTHONPATH': path}, cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == 'flowpipe'


def test_the_cifar10_stand_in_is_read_where_flowpipe_looks(tmp_path, monkeypatch):
    from flowpipe.opensets import CIFAR10
    subprocess.run([sys.executable, str(ROOT / 'scripts' / 'cifar10_standin.py'), str(tmp_path / 'cifar10'), '4'],
                   check=True)
    monkeypatch.setenv('FLOWPIPE_DATA', str(tmp_path))
    cifar = CIFAR10()
    assert (len(cifar.train), len(cifar.test)) == (20, 4)
    images, labels = cifar.test.component('images'), cifar.test.component('labels')
    assert np.asarray(images).shape == (4, 32, 32, 3) and np.asarray(images).dtype == np.uint8
    assert set(np.asarray(labels).tolist()) <= set(range(10))
