"""references(): the shared state named expressions point at."""
from flowpipe.config import Config
from flowpipe.expr import B, C, D, F, I, M, P, R, V, W
from flowpipe.expr.refs import references


def test_variables_models_and_config_are_found_anywhere_in_arguments():
    found = references(([V('x') + 1, {'key': M('net')}], {'opts': Config({'lr': C('lr')})}))
    assert found == {('V', 'x'), ('M', 'net'), ('C', None)}


def test_batch_dataset_iteration_and_random_are_not_shared_state():
    assert references([B.images, B(), D.num_classes, I('c'), R('uniform', size=3), 5, 'text']) == frozenset()


def test_expressions_inside_expressions_calls_defaults_and_wrappers():
    found = references([F(max)(V('a'), B.x), V('b', default=V('c')), P(V('d')), W(V('e')), V('f')[V('g')].shape])
    assert found == {('V', name) for name in 'abcdefg'}


def test_a_name_known_only_per_batch_and_the_whole_config():
    assert references(V(C('which'))) == {('V', None), ('C', None)}
    assert references(C) == {('C', None)}


def test_dict_keys_and_shared_subexpressions_are_walked_once():
    shared = V('x') * 2
    assert references({V('k'): [shared, shared]}) == {('V', 'k'), ('V', 'x')}
