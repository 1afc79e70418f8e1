"""The python blocks of docs/images.md run as written (their asserts are the checks); its figure exists."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / 'docs' / 'images.md'


def test_images_guide_examples_run():
    blocks = re.findall(r'^```python\n(.*?)^```', PAGE.read_text(encoding='utf-8'), flags=re.S | re.M)
    assert len(blocks) >= 3
    for number, source in enumerate(blocks):
        exec(compile(source, f'{PAGE.name}[block {number}]', 'exec'), {'__name__': '__main__'})


def test_images_guide_figure_exists_and_is_small():
    for target in re.findall(r'\]\((\.\./img/[^)]+)\)', PAGE.read_text(encoding='utf-8')):
        image = (PAGE.parent / target).resolve()
        assert image.is_file() and image.stat().st_size < 200_000
