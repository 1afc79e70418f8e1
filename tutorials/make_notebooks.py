"""Write the tutorial notebooks from their cell lists (``nb01_pipelines.py``...): the lists are the source.

Run ``python tutorials/make_notebooks.py`` after editing a cell list; it rewrites ``tutorials/*.ipynb`` (nbformat
4.5, no outputs, a stable id per cell). ``python tutorials/make_notebooks.py --run`` also executes every notebook
with a Jupyter kernel (nbclient and ipykernel, the ``notebooks`` extra) or, without them, its code cells in order
as plain Python; ``tests/test_tutorials.py`` does the same.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NOTEBOOKS = {'01_pipelines.ipynb': 'nb01_pipelines', '02_training.ipynb': 'nb02_training',
             '03_devices.ipynb': 'nb03_devices', '04_data_parallel_from_scratch.ipynb': 'nb04_data_parallel',
             '05_memory_and_microbatches.ipynb': 'nb05_memory', '06_model_parallel.ipynb': 'nb06_model_parallel',
             '07_distributed.ipynb': 'nb07_distributed'}
KERNEL = {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'}
CELL_TIMEOUT = 300     # seconds a cell may run under a kernel before the run fails


def _lines(text: str) -> list[str]:
    lines = text.strip('\n').split('\n')
    return [line + '\n' for line in lines[:-1]] + lines[-1:]


def make_cell(kind: str, text: str, number: int = 0) -> dict:
    """One nbformat-4.5 cell: ``kind`` is ``'md'`` or ``'code'``; its id comes from its position and text."""
    cell_id = f'{number:02d}-{hashlib.sha1(text.strip().encode()).hexdigest()[:8]}'
    if kind == 'md':
        return {'cell_type': 'markdown', 'id': cell_id, 'metadata': {}, 'source': _lines(text)}
    return {'cell_type': 'code', 'execution_count': None, 'id': cell_id, 'metadata': {}, 'outputs': [],
            'source': _lines(text)}


def make_notebook(cells: list[tuple[str, str]]) -> dict:
    """An nbformat-4.5 notebook of ``cells``."""
    return {'cells': [make_cell(kind, text, number) for number, (kind, text) in enumerate(cells)],
            'metadata': {'kernelspec': KERNEL, 'language_info': {'name': 'python'}},
            'nbformat': 4, 'nbformat_minor': 5}


def has_kernel() -> bool:
    """Whether notebooks can run under a Jupyter kernel here (nbclient and ipykernel importable)."""
    try:
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
    except ImportError:
        return False
    return True


def execute_with_kernel(path: Path, facts: dict[str, str] | None = None, threads: int | None = None) -> dict:
    """Run the notebook under a fresh ``python3`` kernel in its folder; returns ``facts`` evaluated at the end.

    ``facts`` maps names to Python expressions over the notebook's variables; their values come back as JSON
    (numpy arrays, numpy scalars and tensors through ``tolist()``, anything else not JSON as its ``str``).
    ``threads`` sets the kernel's ``OMP_NUM_THREADS`` (torch's intra-op threads). A failing cell raises
    ``nbclient.exceptions.CellExecutionError`` with the cell's traceback.
    """
    import nbformat
    from nbclient import NotebookClient
    notebook = nbformat.reads(path.read_text(encoding='utf-8'), as_version=4)
    items = ', '.join(f'{name!r}: {expression}' for name, expression in (facts or {}).items())
    probe = ("import json as _json\n"
             "print('FACTS' + _json.dumps({" + items + "}, default=lambda o: o.tolist() if hasattr(o, 'tolist') "
             "else str(o)))")
    notebook.cells.append(nbformat.v4.new_code_cell(probe))
    env = {**os.environ, 'MPLBACKEND': 'Agg', **({'OMP_NUM_THREADS': str(threads)} if threads else {})}
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name='python3',
                            resources={'metadata': {'path': str(path.parent)}})
    client.execute(env=env)
    text = ''.join(output.get('text', '') for output in notebook.cells[-1].outputs if output.get('name') == 'stdout')
    return json.loads(text.split('FACTS', 1)[1])


def code_cells(path: Path) -> list[str]:
    """The source of every code cell of the notebook at ``path``, in order."""
    notebook = json.loads(path.read_text(encoding='utf-8'))
    return [''.join(cell['source']) for cell in notebook['cells'] if cell['cell_type'] == 'code']


def execute(path: Path) -> dict:
    """Run the notebook's code cells in one namespace as plain Python, in its folder; returns the namespace."""
    namespace = {'__name__': '__main__'}
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        for number, source in enumerate(code_cells(path)):
            exec(compile(source, f'{path.name}[cell {number}]', 'exec'), namespace)
    finally:
        os.chdir(cwd)
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
            execute_with_kernel(notebook) if has_kernel() else execute(notebook)
            print(f'  ran in {time.perf_counter() - start:.1f} s')
