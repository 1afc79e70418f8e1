"""The figures in img/ are current: tutorials/make_figures.py regenerates them into a temporary folder, and what
each shows (the record kept in its PNG: the numbers drawn, a digest of the drawing code) matches the one in img/.
Pixels are not compared: they change with matplotlib, FreeType and the fonts of the machine. The README shows the
first two figures."""
import importlib.util
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / 'tutorials' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _figures_module():
    return _load('make_figures')


def test_figures_are_current(tmp_path):
    pytest.importorskip('matplotlib')
    module = _figures_module()
    paths = module.make([], tmp_path)
    assert sorted(path.name for path in paths) == sorted(f'{name}.png' for name in module.FIGURES)
    record = module.figure_record
    kept = {path.name: record.read(ROOT / 'img' / path.name) for path in paths}
    assert all(kept.values()), f"img/ figures without a record: {[name for name, r in kept.items() if not r]}; " \
                               "run tutorials/make_figures.py to redo them"
    stale = {path.name: record.differences(record.read(path), kept[path.name])[:3] for path in paths}
    stale = {name: found for name, found in stale.items() if found}
    assert not stale, f"img/ differs from what tutorials/make_figures.py draws: {stale}; run it to update img/"


def test_a_record_survives_other_pixels_and_catches_other_numbers(tmp_path):
    record = _load('figure_record')
    kept = {'figure': 'loss_curve', 'code': 'abc', 'data': {'loss': [2.31, 0.5, 1e-17], 'best_epoch': 3}}
    path = tmp_path / 'figure.png'
    shutil.copy(ROOT / 'img' / 'replicas.png', path)
    record.stamp(path, kept)
    record.stamp(path, kept)                                  # a second stamp replaces the first
    assert record.read(path) == kept
    from matplotlib.image import imread
    assert (imread(path) == imread(ROOT / 'img' / 'replicas.png')).all()
    assert record.differences({**kept, 'data': {'loss': [2.311, 0.5, 0.0], 'best_epoch': 3}}, kept) == []
    assert record.differences({**kept, 'data': {'loss': [2.5, 0.5, 1e-17], 'best_epoch': 3}}, kept) == [
        '/data/loss[0]: 2.5 vs 2.31']
    assert record.differences({**kept, 'data': {'loss': [2.31, 0.5], 'best_epoch': 3}}, kept) == [
        '/data/loss: 2 values vs 3']
    assert record.differences({**kept, 'data': {'loss': [2.31, 0.5, 1e-17], 'best_epoch': 4}}, kept) == [
        '/data/best_epoch: 4 vs 3']
    assert record.differences({**kept, 'code': 'abd'}, kept) == ["/code: 'abd' vs 'abc'"]
    with pytest.raises(ValueError, match='Expected a PNG file'):
        record.read(ROOT / 'README.md')


def test_a_change_of_the_drawing_code_is_a_change_of_the_record():
    pytest.importorskip('matplotlib')
    module = _figures_module()
    before = module.record('loss_curve', [1.0])
    source = module.inspect.getsource
    module.inspect.getsource = lambda obj: source(obj).replace("color='#d62'", "color='#26d'")
    try:
        assert module.record('loss_curve', [1.0])['code'] != before['code']
    finally:
        module.inspect.getsource = source
    assert module.record('loss_curve', [1.0]) == before


def test_figure_names_are_checked_and_the_readme_shows_the_first_two():
    module = _figures_module()
    with pytest.raises(ValueError, match="Expected figure names among"):
        module.make(['loss'])
    shown = re.findall(r'\]\((img/[^)]+\.png)\)', (ROOT / 'README.md').read_text(encoding='utf-8'))
    assert shown[:2] == ['img/batch_split.png', 'img/replicas.png']
    assert all((ROOT / image).is_file() for image in shown)
