"""``pip install -e '.[notebooks]'`` installs what every tutorial needs: the packages its code cells import and
those that flowpipe imports for the features they use. Read from the notebooks and pyproject.toml; no network."""
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# flowpipe's own dependencies: installed with flowpipe, whatever the extra
DEPENDENCIES = {'numpy', 'torch', 'dill', 'tqdm'}
# the distribution that brings an import name (IPython comes with ipykernel)
DISTRIBUTIONS = {'matplotlib': 'matplotlib', 'tensorboard': 'tensorboard', 'pandas': 'pandas', 'PIL': 'pillow',
                 'IPython': 'ipykernel', 'ipywidgets': 'ipywidgets', 'dask': 'dask', 'distributed': 'dask',
                 'safetensors': 'safetensors', 'onnx': 'onnx', 'onnxscript': 'onnxscript', 'psutil': 'psutil'}
# flowpipe features that import an optional package when they run: (a pattern in a code cell, its distribution)
FEATURES = [(r"executor\s*=\s*'dask'", 'dask'), (r'\.df\b|\.to_df\(', 'pandas'), (r'\bTensorBoardLogger\(', 'tensorboard'),
            (r'\.plot\(', 'matplotlib'), (r'\bto_onnx\(|\bexport\(', 'onnx')]


def needed(source: str) -> set[str]:
    """The distributions a notebook's code needs beyond flowpipe's own dependencies."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split('.')[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split('.')[0])
    names -= set(sys.stdlib_module_names) | DEPENDENCIES | {'flowpipe'}
    unknown = names - set(DISTRIBUTIONS)
    assert not unknown, f"add the distribution of {sorted(unknown)} to DISTRIBUTIONS"
    return {DISTRIBUTIONS[name] for name in names} | {dist for pattern, dist in FEATURES if re.search(pattern, source)}


def code(notebook: Path) -> str:
    cells = json.loads(notebook.read_text(encoding='utf-8'))['cells']
    lines = (''.join(cell['source']) for cell in cells if cell['cell_type'] == 'code')
    return '\n'.join('\n'.join(line for line in cell.splitlines() if not line.lstrip().startswith(('%', '!')))
                     for cell in lines)


def extra(name: str) -> set[str]:
    """The distributions an extra of pyproject.toml lists, with the extras of flowpipe it names resolved."""
    text = (ROOT / 'pyproject.toml').read_text(encoding='utf-8')
    listed = re.search(rf'^{name} = \[(.*?)\]$', text, re.M | re.S)
    assert listed, f'no extra {name!r} in pyproject.toml'
    found = set()
    for requirement in re.findall(r'"([^"]+)"', listed.group(1)):
        distribution, _, extras = re.match(r'([A-Za-z0-9_.-]+)(\[([^\]]*)\])?', requirement).groups()
        if distribution == 'flowpipe':
            found |= set().union(*(extra(part.strip()) for part in extras.split(',')))
        else:
            found.add(distribution.lower())
    return found


def test_the_notebooks_extra_installs_what_every_tutorial_needs():
    notebooks = sorted((ROOT / 'tutorials').glob('*.ipynb'))
    assert len(notebooks) >= 9
    provided = extra('notebooks')
    missing = {notebook.name: sorted(needed(code(notebook)) - provided) for notebook in notebooks}
    assert not any(missing.values()), {name: found for name, found in missing.items() if found}
    assert {'notebook', 'ipykernel'} <= provided                  # and the tools to open and run them


def test_a_tutorial_using_tensorboard_or_dask_needs_them():
    source = ("import matplotlib.pyplot as plt\nfrom tensorboard.backend import event_processing\n"
              "research.run(executor='dask')\ntable = research.results.df\n")
    assert needed(source) == {'matplotlib', 'tensorboard', 'dask', 'pandas'}
    assert needed('import os, numpy, torch\nfrom flowpipe import B\n') == set()
    assert 'tensorboard' in extra('tensorboard') and 'dask' in extra('dask')
