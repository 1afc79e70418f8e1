"""Run the code cells of batchflow's tutorial notebooks, cell by cell, and report which ones run.

``python scripts/batchflow_notebooks.py EXAMPLES_DIR [NOTEBOOK ...] [--reference] [--json FILE]``

The notebooks are batchflow's ``examples/*.ipynb`` from its source distribution. Only two things change, the
imports and the data:

- without ``--reference`` (run with ``scripts`` on ``PYTHONPATH``) the import alias ``batchflow_alias`` makes every
  ``batchflow`` import load flowpipe, and the data sets a notebook downloads (``MNIST``, ``CIFAR10``...) are
  flowpipe's shipped ``Digits``;
- with ``--reference`` (run where batchflow is installed) batchflow itself runs, on the same Digits data (read
  from flowpipe's shipped file and handed to a batchflow ``Dataset`` of ``ImagesBatch`` as PIL images, the form
  batchflow's open sets give).

IPython magics and shell lines (``%matplotlib``, ``!head``) are dropped, ``%time stmt`` runs ``stmt``. Cells run
in order in one namespace, each to completion or to its first error. Matplotlib draws off screen.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time
from pathlib import Path

OPENSETS = ('MNIST', 'CIFAR10', 'CIFAR100', 'ImageWoof2', 'Imagenette', 'PascalSegmentation')
DIGITS_FILE = Path(__file__).resolve().parents[1] / 'flowpipe' / 'opensets' / 'data' / 'digits.csv.gz'


def cell_sources(path: Path) -> list[tuple[int, str]]:
    """``(cell number, source)`` of every code cell, magics dropped."""
    cells = json.loads(path.read_text(encoding='utf-8'))['cells']
    return [(number, _plain_python(''.join(cell['source']))) for number, cell in enumerate(cells)
            if cell['cell_type'] == 'code']


def _plain_python(source: str) -> str:
    lines = []
    for line in source.splitlines():
        stripped = line.lstrip()
        indent = line[:len(line) - len(stripped)]
        if stripped.startswith('%time ') or stripped.startswith('%timeit '):
            lines.append(indent + stripped.split(' ', 1)[1])
        elif stripped.startswith(('%', '!')):
            lines.append(indent + 'pass')
        else:
            lines.append(_swap_opensets(line))
    return '\n'.join(lines)


def _swap_opensets(line: str) -> str:
    """``from batchflow.opensets import MNIST, CIFAR10`` binds those names to the Digits data set instead."""
    match = re.match(r'^(\s*)from batchflow\.opensets(\.\w+)? import (.+)$', line)
    if not match:
        return line
    names = [name.strip() for name in match.group(3).strip('()').split(',') if name.strip()]
    return match.group(1) + ' = '.join(names + ['_DIGITS'])


def flowpipe_digits():
    """flowpipe's open set class standing in for the data sets a notebook downloads."""
    import batchflow_alias  # noqa: F401 - installs the batchflow -> flowpipe import alias
    from flowpipe.opensets import Digits
    return Digits


def reference_digits():
    """The same Digits items as a batchflow ``Dataset`` of ``ImagesBatch`` with PIL images (batchflow's form)."""
    import gzip

    import numpy as np
    from PIL import Image
    from batchflow import Dataset, ImagesBatch

    with gzip.open(DIGITS_FILE, 'rt') as text:
        table = np.loadtxt(text, delimiter=',', dtype=np.int64, ndmin=2)
    order = np.random.default_rng(0).permutation(len(table))
    table = table[order]
    images = np.empty(len(table), dtype=object)
    for position, row in enumerate(table):
        images[position] = Image.fromarray(np.rint(row[:64] * (255 / 16)).astype(np.uint8).reshape(8, 8))
    labels = table[:, 64]
    n_train = int(len(table) * 0.8)

    def make(*args, batch_class=ImagesBatch, **kwargs):
        dataset = Dataset(len(labels), batch_class=batch_class, preloaded=(images, labels), num_classes=10,
                          classes=[str(digit) for digit in range(10)])
        dataset.train = dataset.create_subset(np.arange(n_train))
        dataset.test = dataset.create_subset(np.arange(n_train, len(labels)))
        return dataset
    return make


def run_notebook(path: Path, digits) -> dict[str, str]:
    """Run every code cell; ``{cell number: 'ok' or the error's first line}``."""
    namespace = {'__name__': '__main__', '_DIGITS': digits}
    results = {}
    for number, source in cell_sources(path):
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(source, f'{path.name}[{number}]', 'exec'), namespace)
            results[str(number)] = 'ok'
        except BaseException as error:  # noqa: BLE001 - every failure is a result, KeyboardInterrupt aside
            if isinstance(error, KeyboardInterrupt):
                raise
            lines = f'{type(error).__name__}: {error}'.strip().splitlines()
            results[str(number)] = lines[0][:300] if lines else type(error).__name__
        print(f'  {path.stem}[{number}]: {results[str(number)][:120]} ({time.perf_counter() - started:.1f} s)',
              file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('examples', type=Path)
    parser.add_argument('notebooks', nargs='*')
    parser.add_argument('--reference', action='store_true', help='run batchflow itself')
    parser.add_argument('--json', type=Path, help='write the results here')
    args = parser.parse_args()
    args.examples = args.examples.resolve()
    os.environ.setdefault('MPLBACKEND', 'Agg')
    digits = reference_digits() if args.reference else flowpipe_digits()
    names = args.notebooks or sorted(path.stem for path in args.examples.glob('0*.ipynb'))
    results = {}
    for name in names:
        os.chdir(args.examples)
        results[name] = run_notebook(args.examples / f'{name}.ipynb', digits)
        passed = sum(value.startswith('ok') for value in results[name].values())
        print(f'{name}: {passed}/{len(results[name])} cells run', file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == '__main__':
    main()
