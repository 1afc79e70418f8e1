"""flowpipe.research.when: batchflow's when= forms."""
import pytest

from flowpipe.research.when import check_when, must_execute


@pytest.mark.parametrize('when, n_iters, expected', [
    (1, 5, [0, 1, 2, 3, 4]), (2, 5, [1, 3]), ('%0', 5, [0]), ('#3', 5, [3]), ('last', 5, [4]),
    ([2, 'last'], 5, [1, 3, 4]),
])
def test_forms(when, n_iters, expected):
    items = check_when(when)
    assert [i for i in range(n_iters) if must_execute(i, items, n_iters)] == expected


def test_last_when_stopped_early():
    assert must_execute(2, ['last'], None, last=True) and not must_execute(2, ['last'], None)


@pytest.mark.parametrize('bad', [0, -1, 'first', '%x', 1.5, True])
def test_bad_when_raises(bad):
    with pytest.raises(ValueError, match='when='):
        check_when(bad)
