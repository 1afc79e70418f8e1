"""No test depends on the machine's speed: pytest-timeout's limit is one hang guard far above any test's time on a
loaded machine (docs/design.md, "The test suite"), and no test sets a tighter one of its own."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HANG_GUARD = 1800


def test_the_suite_wide_limit_only_catches_a_hang():
    limits = re.findall(r'^timeout = (\d+)$', (ROOT / 'pyproject.toml').read_text(encoding='utf-8'), re.M)
    assert len(limits) == 1 and int(limits[0]) >= HANG_GUARD, limits


def test_no_test_sets_a_tighter_time_limit():
    tighter = [f'{path.relative_to(ROOT)}: {match.group(0)}' for path in sorted((ROOT / 'tests').rglob('*.py'))
               for match in re.finditer(r'mark\.timeout\((\d+)\)', path.read_text(encoding='utf-8'))
               if int(match.group(1)) < HANG_GUARD]
    assert not tighter, tighter
