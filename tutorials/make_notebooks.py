"""Write the tutorial notebooks from their cell lists (``nb01_pipelines.py``...): the lists are the source.

The notebooks are stored executed, so a reader sees their outputs without running them. After editing a cell
list run ``python tutorials/make_notebooks.py --run``: it rewrites ``tutorials/*.ipynb`` (nbformat 4.5, a stable
id per cell), executes each one under a Jupyter kernel (nbclient and ipykernel, the ``notebooks`` extra), one at a
time with one torch thread, and stores the outputs cleaned up: progress bars at their final state, no absolute
paths, no timing metadata. Names of notebooks (``03_devices.ipynb``) limit the run to them. Without ``--run``
a notebook whose cells changed is written without outputs (a test then asks for ``--run``) and the others keep
theirs. ``tests/test_tutorials.py`` executes the notebooks again, with a kernel where one is installed or as plain
Python otherwise.
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
NOTEBOOKS = {'01_pipelines.ipynb': 'nb01_pipelines', '02_training.ipynb': 'nb02_training',
             '03_devices.ipynb': 'nb03_devices', '04_data_parallel_from_scratch.ipynb': 'nb04_data_parallel',
             '05_memory_and_microbatches.ipynb': 'nb05_memory', '06_model_parallel.ipynb': 'nb06_model_parallel',
             '07_distributed.ipynb': 'nb07_distributed', '08_training_run.ipynb': 'nb08_training_run',
             '09_research.ipynb': 'nb09_research', '10_segmentation.ipynb': 'nb10_segmentation',
             '11_language_model.ipynb': 'nb11_language_model'}
KERNEL = {'display_name': 'Python 3', 'language': 'python', 'name': 'python3'}
CELL_TIMEOUT = 1800    # a hang guard: far above any cell's time on a loaded machine
STORED_THREADS = 1     # torch threads of the kernel that makes the stored outputs: steady on a shared machine


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


def strip_outputs(notebook: dict) -> dict:
    """A copy of ``notebook`` without outputs and execution counts: what ``make_notebook`` writes."""
    bare = copy.deepcopy(notebook)
    for cell in bare['cells']:
        if cell['cell_type'] == 'code':
            cell['outputs'], cell['execution_count'] = [], None
    return bare


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
    notebook = nbformat.reads(path.read_text(encoding='utf-8'), as_version=4)
    items = ', '.join(f'{name!r}: {expression}' for name, expression in (facts or {}).items())
    probe = ("import json as _json\n"
             "print('FACTS' + _json.dumps({" + items + "}, default=lambda o: o.tolist() if hasattr(o, 'tolist') "
             "else str(o)))")
    notebook.cells.append(nbformat.v4.new_code_cell(probe))
    _run_cells(notebook, path.parent, threads)
    text = ''.join(output.get('text', '') for output in notebook.cells[-1].outputs if output.get('name') == 'stdout')
    return json.loads(text.split('FACTS', 1)[1])


def _run_cells(notebook: Any, folder: Path, threads: int | None) -> None:
    from nbclient import NotebookClient
    env = {**os.environ, 'MPLBACKEND': 'Agg', **({'OMP_NUM_THREADS': str(threads)} if threads else {})}
    client = NotebookClient(notebook, timeout=CELL_TIMEOUT, kernel_name='python3', record_timing=False,
                            resources={'metadata': {'path': str(folder)}})
    client.execute(env=env)


def store_executed(path: Path) -> None:
    """Execute the notebook at ``path`` under a kernel and write it back with its cleaned outputs."""
    import nbformat
    notebook = nbformat.reads(path.read_text(encoding='utf-8'), as_version=4)
    metadata = copy.deepcopy(notebook.metadata)
    _run_cells(notebook, path.parent, STORED_THREADS)
    executed = json.loads(nbformat.writes(notebook))
    executed['metadata'] = metadata       # not the kernel's version details: the file stays the same elsewhere
    for cell in executed['cells']:
        cell['metadata'].pop('execution', None)
        if cell['cell_type'] == 'code':
            cell['outputs'] = clean_outputs(cell['outputs'])
    path.write_text(json.dumps(executed, indent=1, ensure_ascii=False) + '\n', encoding='utf-8')


def clean_outputs(outputs: list[dict]) -> list[dict]:
    """Outputs as a reader should see them: consecutive streams joined, each progress bar at its last state
    (the text after a line's last carriage return) and absolute paths of this machine made relative."""
    joined: list[dict] = []
    for output in outputs:
        output = copy.deepcopy(output)
        if 'text' in output:
            output['text'] = ''.join(output['text']) if isinstance(output['text'], list) else output['text']
        previous = joined[-1] if joined else {}
        if output.get('output_type') == 'stream' == previous.get('output_type') and \
                output['name'] == previous['name']:
            previous['text'] += output['text']
            continue
        joined.append(output)
    cleaned = []
    for output in joined:
        if 'text' in output:
            # tqdm's notice that ipywidgets is missing is about the machine that ran the notebook, not the reader's
            text = re.sub(r'^.*TqdmWarning: IProgress not found.*\n.*\n?', '', _plain_text(output['text']),
                          flags=re.M)
            if not text.strip():
                continue
            output['text'] = _lines(text)
        if 'text/plain' in output.get('data', {}):
            output['data']['text/plain'] = _lines(_plain_text(output['data']['text/plain']))
        cleaned.append(output)
    return cleaned


def _plain_text(text: str | list[str]) -> str:
    text = ''.join(text) if isinstance(text, list) else text
    text = '\n'.join(line.rsplit('\r', 1)[-1] if '\r' in line.rstrip('\r') else line.rstrip('\r')
                     for line in text.split('\n'))
    # the checkout first: it may itself lie in the temporary folder (a fresh clone in /tmp)
    text = text.replace(str(HERE.parent), '.')
    # temporary folders have random names: one placeholder keeps the stored text the same from run to run
    text = re.sub(re.escape(tempfile.gettempdir()) + r'/[^\s\'"/]+', '<temporary folder>', text)
    text = text.replace(str(Path.home()), '~')
    # installed packages, wherever the environment lives (warnings name the file that raised them)
    return re.sub(r'[^\s\'"]*/site-packages/', '.../site-packages/', text)


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
    """Rewrite every notebook whose cells differ from its cell list, without outputs; returns them all.

    A notebook whose cells are unchanged keeps its stored outputs.
    """
    sys.path.insert(0, str(HERE))
    written = []
    for filename, module_name in NOTEBOOKS.items():
        cells = importlib.import_module(module_name).CELLS
        for number, (kind, text) in enumerate(cells):
            if kind == 'code' and any(line.lstrip().startswith('%') for line in text.splitlines()):
                raise ValueError(f"{module_name} cell {number}: cell magics do not run as plain Python")
        path, bare = HERE / filename, make_notebook(cells)
        if not path.is_file() or strip_outputs(json.loads(path.read_text(encoding='utf-8'))) != bare:
            path.write_text(json.dumps(bare, indent=1, ensure_ascii=False) + '\n', encoding='utf-8')
        written.append(path)
    return written


if __name__ == '__main__':
    if '--run' in sys.argv and not has_kernel():
        sys.exit("Expected nbclient and ipykernel to store executed notebooks. Received: not installed; "
                 "pip install -e '.[notebooks]'")
    names = [arg for arg in sys.argv[1:] if not arg.startswith('--')]   # e.g. 03_devices.ipynb: only that one
    for notebook in write_all():
        if names and notebook.name not in names:
            continue
        print(notebook.relative_to(HERE.parent), flush=True)
        if '--run' in sys.argv:
            start = time.perf_counter()
            store_executed(notebook)
            print(f'  ran and stored in {time.perf_counter() - start:.1f} s', flush=True)
