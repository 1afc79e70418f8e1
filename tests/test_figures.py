"""The figures in img/ are current: tutorials/make_figures.py regenerates them into a temporary folder and each
matches img/ byte for byte or within the documented tolerance (same size; at most 0.5 % of the pixels differ by
more than 1/8 of the colour range in some channel), and the README shows the first two."""
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _figures_module():
    spec = importlib.util.spec_from_file_location('make_figures', ROOT / 'tutorials' / 'make_figures.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _close(made: Path, kept: Path) -> bool:
    from matplotlib.image import imread
    new, old = imread(made), imread(kept)
    if new.shape != old.shape:
        return False
    differing = (np.abs(new - old) > 1 / 8).any(axis=-1)
    return differing.mean() <= 0.005


@pytest.mark.timeout(300)
def test_figures_are_current(tmp_path):
    pytest.importorskip('matplotlib')
    module = _figures_module()
    paths = module.make([], tmp_path)
    assert sorted(path.name for path in paths) == sorted(f'{name}.png' for name in module.FIGURES)
    stale = [path.name for path in paths
             if path.read_bytes() != (ROOT / 'img' / path.name).read_bytes() and not _close(path, ROOT / 'img' / path.name)]
    assert not stale, f"img/ differs from what tutorials/make_figures.py makes: {stale}; run it to update img/"


def test_figure_names_are_checked_and_the_readme_shows_the_first_two():
    module = _figures_module()
    with pytest.raises(ValueError, match="Expected figure names among"):
        module.make(['loss'])
    shown = re.findall(r'\]\((img/[^)]+\.png)\)', (ROOT / 'README.md').read_text(encoding='utf-8'))
    assert shown[:2] == ['img/batch_split.png', 'img/replicas.png']
    assert all((ROOT / image).is_file() for image in shown)
