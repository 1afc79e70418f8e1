"""The API reference (``make docs``: Sphinx over ``docs/api``) builds with warnings as errors, and documents every
public name of flowpipe's packages and every pipeline action with its parameters."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ('flowpipe', 'flowpipe.models.torch', 'flowpipe.parallel', 'flowpipe.callbacks', 'flowpipe.progress',
            'flowpipe.data', 'flowpipe.batch', 'flowpipe.expr', 'flowpipe.opensets', 'flowpipe.research',
            'flowpipe.pipeline', 'flowpipe.execution', 'flowpipe.plotter')


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    pytest.importorskip('sphinx', reason="the API reference needs Sphinx: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp('api')
    done = subprocess.run([sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html',
                           str(ROOT / 'docs' / 'api'), str(out)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def _names(built):
    from sphinx.util.inventory import InventoryFile
    with open(built / 'objects.inv', 'rb') as file:
        inventory = InventoryFile.load(file, '', lambda base, uri: uri)
    return {name for group in inventory.values() for name in group}


def test_every_package_is_documented_with_every_public_name(built):
    documented = _names(built)
    for package in PACKAGES:
        assert package in {page.stem for page in built.glob('*.html')} or any(
            f'``{package}``' in page.read_text() or package in page.read_text() for page in built.glob('*.html'))
        module = importlib.import_module(package)
        text = ''.join(page.read_text() for page in built.glob('*.html'))
        for name in module.__all__:
            assert f'{package}.{name}' in documented or f'{package}.{name}' in text, f'{package}.{name}'


def test_every_action_appears_with_its_parameters(built):
    from flowpipe.pipeline.registry import builtin_names
    page = (built / 'actions.html').read_text()
    for name in builtin_names():
        assert f'<span class="pre">{name}</span>' in page, name
    for action, parameter in (('train_model', 'fetches'), ('resize', 'size'), ('init_model', 'model_class'),
                              ('apply_parallel', 'func'), ('to_array', 'dtype')):
        at = page.index(f'<span class="pre">{action}</span>')
        assert parameter in page[at:at + 3000], (action, parameter)
