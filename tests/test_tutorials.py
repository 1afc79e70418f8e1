"""The tutorials run as written: every notebook's code cells, in order, as plain Python in one namespace.

Each test then checks a few facts the notebook establishes, so a change that breaks a tutorial fails here.
``tutorials/make_notebooks.py`` writes the notebooks from their cell lists; a test keeps the two in sync.
The ``python`` code blocks of ``docs/pipelines.md`` run the same way (their asserts are the checks).
"""
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / 'tutorials'


def _builder():
    spec = importlib.util.spec_from_file_location('make_notebooks', TUTORIALS / 'make_notebooks.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_notebook(name):
    """Execute the notebook's code cells from the repository root; returns the namespace."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return _builder().execute(TUTORIALS / name)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize('name', sorted(_builder().NOTEBOOKS))
def test_notebook_is_valid_nbformat4_and_in_sync_with_its_cells(name):
    builder = _builder()
    notebook = json.loads((TUTORIALS / name).read_text(encoding='utf-8'))
    assert notebook['nbformat'] == 4
    sys.path.insert(0, str(TUTORIALS))
    try:
        spec = importlib.util.spec_from_file_location(builder.NOTEBOOKS[name], TUTORIALS / f'{builder.NOTEBOOKS[name]}.py')
        cells = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(cells)
    finally:
        sys.path.remove(str(TUTORIALS))
    assert notebook == builder.make_notebook(cells.CELLS), \
        f"{name} differs from its cell list: run `python tutorials/make_notebooks.py`"
    sources = [''.join(cell['source']) for cell in notebook['cells'] if cell['cell_type'] == 'code']
    assert sources and not any(line.lstrip().startswith('%') for source in sources for line in source.splitlines())
    try:
        import nbformat
    except ImportError:
        return
    nbformat.validate(nbformat.reads(json.dumps(notebook), as_version=4))


@pytest.mark.timeout(120)
def test_01_pipelines():
    ns = run_notebook('01_pipelines.ipynb')
    assert ns['epoch_batches'] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1], [2, 3, 4, 5], [6, 7, 8, 9]]
    counting = ns['counting']
    assert counting.v('seen') == 0            # reset('variables') gave the declared default back
    assert ns['shapes'] == [(64, 1, 16, 16)] * 3
    assert ns['first'].v('means') == ns['second'].v('means') and len(ns['first'].v('means')) == 12
    assert ns['combined'].v('batches') == 4 and ns['combined'].v('done') is True
    assert ns['lazy_batches'] == 8            # 2 epochs of 360 items in batches of 90


@pytest.mark.timeout(180)
def test_02_training():
    ns = run_notebook('02_training.ipynb')
    losses = ns['losses']
    assert len(losses) == 4 * (1437 // 64)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert ns['accuracy'] > 0.8
    assert ns['loaded_accuracy'] == ns['accuracy']
    assert ns['same_with_prefetch'] is True
    assert 'train_model' in ns['profiled'].profile_summary()


@pytest.mark.timeout(120)
def test_03_devices():
    ns = run_notebook('03_devices.ipynb')
    assert len(ns['two_devices'].v('loss_history')) == -(-2 * 1437 // 50)
    assert 'shards [8, 8]' in ns['model'].device_plan(50)
    assert ns['no_bn_difference'] < 1e-10
    assert ns['bn_difference'] > 1e-6


def test_07_distributed():
    ns = run_notebook('07_distributed.ipynb')
    assert [len(ns['ranks'][rank]['seen'][0]) for rank in (0, 1)] == [25, 25]
    assert ns['difference'] < 1e-10 and ns['uneven_difference'] < 1e-10
    np.testing.assert_allclose(ns['ranks'][1]['loss'], ns['alone']['loss'], rtol=1e-10)
    assert 'rank 1 failed: ValueError: rank 1 cannot read its data' in str(ns['failure'])


def doc_blocks(path):
    """The ```python blocks of a markdown file, in order."""
    return re.findall(r'^```python\n(.*?)^```', path.read_text(encoding='utf-8'), flags=re.S | re.M)


@pytest.mark.timeout(120)
def test_pipelines_guide_examples_run():
    path = ROOT / 'docs' / 'pipelines.md'
    blocks = doc_blocks(path)
    assert len(blocks) > 20
    namespace = {'__name__': '__main__'}
    for number, source in enumerate(blocks):
        exec(compile(source, f'{path.name}[block {number}]', 'exec'), namespace)
    assert namespace['flow'].v('kept') == [0, 2]


def test_doc_images_exist_and_are_small():
    for page in (ROOT / 'docs' / 'pipelines.md', *sorted(TUTORIALS.glob('nb0*.py'))):
        for target in re.findall(r'\]\((\.\./img/[^)]+)\)', page.read_text(encoding='utf-8')):
            image = (page.parent / target).resolve()
            assert image.is_file(), f"{page.name} shows {target}, which does not exist"
            assert image.stat().st_size < 200_000
