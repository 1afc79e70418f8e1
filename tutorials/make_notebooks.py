"""Write the tutorial notebooks from their cell lists (``nb01_pipelines.py``...): the lists are the source.

Run ``python tutorials/make_notebooks.py`` after editing a cell list; it rewrites ``tutorials/*.ipynb`` (nbformat 4,
no outputs). ``python tutorials/make_notebooks.py --run`` also executes every notebook's code cells in order as
plain Python, the way ``tests/test_tutorials.py`` does.
"""
from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOTEBOOKS = {'01_pipelines.ipynb': 'nb01_pipelines', '02_training.ipynb': 'nb02_training',
             '03_devices.ipynb': 'nb03_devices', '07_distributed.ipynb': 'nb07_distributed'}
KERNEL = {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'}


def _lines(text: str) -> list[str]:
    lines = text.strip('\n').split('\n')
    return [line + '\n' for line in lines[:-1]] + lines[-1:]


def make_cell(kind: str, text: str) -> dict:
    """One nbformat-4 cell: ``kind`` is ``'md'`` or ``'code'``."""
    if kind == 'md':
        return {'cell_type': 'markdown', 'metadata': {}, 'source': _lines(text)}
    return {'cell_type': 'code', 'execution_count': None, 'metadata': {}, 'outputs': [], 'source': _lines(text)}


def make_notebook(cells: list[tuple[str, str]]) -> dict:
    """An nbformat-4 notebook of ``cells``."""
    return {'cells': [make_cell(kind, text) for kind, text in cells],
            'metadata': {'kernelspec': KERNEL, 'language_info': {'name': 'python'}},
            'nbformat': 4, 'nbformat_minor': 5}


def code_cells(path: Path) -> list[str]:
    """The source of every code cell of the notebook at ``path``, in order."""
    notebook = json.loads(path.read_text(encoding='utf-8'))
    return [''.join(cell['source']) for cell in notebook['cells'] if cell['cell_type'] == 'code']


def execute(path: Path) -> dict:
    """Run the notebook's code cells in one namespace as plain Python; returns the namespace."""
    namespace = {'__name__': '__main__'}
    for number, source in enumerate(code_cells(path)):
        exec(compile(source, f'{path.name}[cell {number}]', 'exec'), namespace)
    return namespace


def write_all() -> list[Path]:
    """Rewrite every notebook from its cell list."""
    sys.path.insert(0, str(HERE))
    written = []
    for filename, module_name in NOTEBOOKS.items():
        cells = importlib.import_module(module_name).CELLS
        for number, (kind, text) in enumerate(cells):
            if kind == 'code' and any(line.lstrip().startswith('%') for line in text.splitlines()):
                raise ValueError(f"{module_name} cell {number}: cell magics do not run as plain Python")
        path = HERE / filename
        path.write_text(json.dumps(make_notebook(cells), indent=1, ensure_ascii=False) + '\n', encoding='utf-8')
        written.append(path)
    return written


if __name__ == '__main__':
    for notebook in write_all():
        print('wrote', notebook.relative_to(HERE.parent))
        if '--run' in sys.argv:
            start = time.perf_counter()
            execute(notebook)
            print(f'  ran in {time.perf_counter() - start:.1f} s')
