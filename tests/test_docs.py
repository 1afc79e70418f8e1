"""The guides are self-contained: no ``docs/*.md`` (nor the README) cites a document outside the repository (the
product's specification is not shipped: a "SPEC §n" citation names nothing a reader has), and every relative link
points at a file of the repository and, with ``#anchor``, at one of its sections."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / 'docs').glob('*.md')) + [ROOT / 'README.md']
LINK = re.compile(r'\[[^\]]*\]\(([^)\s]+)\)')
OUTSIDE = re.compile(r'SPEC\s*§|SPEC\.md|\.\./shared|shared/seeds|STYLE\.md')


def _anchors(path):
    """GitHub's anchors of a page's headings."""
    anchors = set()
    for line in path.read_text().splitlines():
        if line.startswith('#') and not line.startswith('#!'):
            title = line.lstrip('#').strip().lower()
            anchors.add(re.sub(r'[^\w\- ]', '', title).replace(' ', '-'))
    return anchors


@pytest.mark.parametrize('page', PAGES, ids=[page.name for page in PAGES])
def test_a_page_cites_nothing_outside_the_repository(page):
    found = [line.strip() for line in page.read_text().splitlines() if OUTSIDE.search(line)]
    assert not found, f'{page.name} cites documents outside the repository: {found[:3]}'


@pytest.mark.parametrize('page', PAGES, ids=[page.name for page in PAGES])
def test_every_relative_link_points_into_the_repository(page):
    for target in LINK.findall(page.read_text()):
        if re.match(r'[a-z]+://|mailto:', target):
            continue
        path, _, anchor = target.partition('#')
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists() and ROOT in linked.parents or linked == ROOT, f'{page.name}: {target}'
        if anchor and linked.suffix == '.md':
            assert anchor in _anchors(linked), f'{page.name}: {target} (no such section)'
