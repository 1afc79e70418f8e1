"""scripts/batchflow_alias.py: `import batchflow.x` loads flowpipe.x (used by scripts/batchflow_compat.sh)."""
import importlib.util
import pathlib
import sys

import pytest

SCRIPT = pathlib.Path(__file__).parents[1] / 'scripts' / 'batchflow_alias.py'


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
