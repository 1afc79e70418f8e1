"""How a sharded validation rebuilds one process's variables from what each rank's block of batches wrote."""
import numpy as np
import pytest

from flowpipe.callbacks.validate import _snapshot, _written, merge_variables


def _written_by(before, change):
    initial = {name: _snapshot(value) for name, value in before.items()}
    change(before)
    return _written(initial, before)


def test_a_list_extended_in_place_gives_its_new_items_and_unchanged_variables_nothing():
    first = np.zeros(2)
    variables = {'losses': [first], 'stats': {'a': 1}, 'count': 3, 'empty': []}

    def change(v):
        v['losses'].append(0.5)
        v['losses'].extend([0.25, 0.125])
    assert _written_by(variables, change) == {'losses': ('items', [0.5, 0.25, 0.125])}


def test_a_list_made_anew_with_the_same_first_items_counts_as_extended():
    items = [object(), object()]
    written = _written_by({'x': items[:1]}, lambda v: v.update(x=v['x'] + items[1:]))
    assert written == {'x': ('items', items[1:])}


@pytest.mark.parametrize('change', [
    lambda v: v['x'].pop(0),                            # a list that lost items
    lambda v: v.update(x=['other', 2]),                 # a list replaced
    lambda v: v['array'].__iadd__(1),                   # an array summed into in place
    lambda v: v.update(total=v['total'] + 1),           # a number summed into
    lambda v: v['table'].update(b=2),                   # a dict changed in place
    lambda v: v.update(new=1.5),                        # a new variable that is not a list
])
def test_any_other_change_is_a_value(change):
    variables = {'x': [1, 2], 'array': np.zeros(3), 'total': 0, 'table': {'a': 1}}
    written = _written_by(variables, change)
    assert len(written) == 1 and next(iter(written.values()))[0] == 'value'


def test_ranks_lists_join_in_rank_order_after_the_initial_items():
    written = [{'p': ('items', [1, 2]), 'new': ('items', ['a'])}, {}, {'p': ('items', [3])}]
    assert merge_variables({'p': [0], 'untouched': [9]}, written) == {'p': [0, 1, 2, 3], 'new': ['a']}


def test_a_value_on_any_rank_is_refused_naming_the_variable_and_the_way_out():
    written = [{'p': ('items', [1])}, {'p': ('value', 5)}]
    with pytest.raises(ValueError, match=r"variable 'p' changed otherwise.*shard=False"):
        merge_variables({'p': []}, written)
