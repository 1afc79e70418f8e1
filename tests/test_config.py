"""Config: nested mapping with '/' keys."""
import pickle
import re

import dill
import pytest

from flowpipe.config import Config


def test_slash_keys_build_nested_mappings():
    cfg = Config({'a/b': 1, 'a/c': 2, 'd': 3})
    assert cfg['a']['b'] == 1
    assert cfg['a/c'] == 2
    assert isinstance(cfg['a'], dict)
    assert cfg['a']['c'] == 2
    assert cfg.to_dict() == {'a': {'b': 1, 'c': 2}, 'd': 3}


def test_nested_dict_values_are_parsed_too():
    cfg = Config({'x': {'y/z': 5}})
    assert cfg['x/y/z'] == 5
    assert cfg['x']['y/z'] == 5


def test_empty_and_copy_constructors():
    assert Config(None) == {}
    assert len(Config()) == 0
    original = Config({'a/b': 1})
    copied = Config(original)
    copied['a/b'] = 2
    assert original['a/b'] == 1


def test_kwargs_constructor():
    assert Config({'a': 1}, b=2) == {'a': 1, 'b': 2}


def test_get_returns_default_for_missing_paths():
    cfg = Config({'a/b': 1, 'n': 5})
    assert cfg.get('a/b') == 1
    assert cfg.get('a/x') is None
    assert cfg.get('a/x', 7) == 7
    assert cfg.get('n/deeper', 'no') == 'no'
    assert cfg.get('missing', 0) == 0


def test_contains_is_path_aware():
    cfg = Config({'a/b/c': 1})
    assert 'a' in cfg
    assert 'a/b' in cfg
    assert 'a/b/c' in cfg
    assert 'a/c' not in cfg
    assert 'a/b/c/d' not in cfg
    assert 'b' not in cfg


def test_put_merges_mappings_and_replaces_values():
    cfg = Config({'a/b': 1})
    cfg.put('a', {'c': 2})
    assert cfg == {'a': {'b': 1, 'c': 2}}
    cfg.put('a/b', 10)
    assert cfg['a/b'] == 10
    cfg.put('a', 'flat')
    assert cfg['a'] == 'flat'


def test_setitem_replaces_instead_of_merging():
    cfg = Config({'a/b': 1})
    cfg['a'] = {'c': 2}
    assert cfg == {'a': {'c': 2}}
    cfg['x/y'] = 3
    assert cfg['x'] == {'y': 3}


def test_update_is_recursive():
    cfg = Config({'model': {'loss': 'ce', 'optimizer': {'name': 'Adam', 'lr': 0.1}}})
    cfg.update({'model/optimizer': {'lr': 0.01}}, device='cpu')
    assert cfg['model/optimizer'] == {'name': 'Adam', 'lr': 0.01}
    assert cfg['model/loss'] == 'ce'
    assert cfg['device'] == 'cpu'


def test_pop_with_paths_and_defaults():
    cfg = Config({'a/b': 1, 'a/c': 2})
    assert cfg.pop('a/b') == 1
    assert cfg == {'a': {'c': 2}}
    assert cfg.pop('a/zz', None) is None
    with pytest.raises(KeyError, match="a/zz"):
        cfg.pop('a/zz')


def test_delitem_with_path():
    cfg = Config({'a/b': 1, 'a/c': 2})
    del cfg['a/b']
    assert cfg == {'a/c': 2}


def test_flatten():
    cfg = Config({'a/b': 1, 'a/c/d': 2, 'e': 3})
    assert cfg.flatten() == {'a/b': 1, 'a/c/d': 2, 'e': 3}


def test_flatten_keeps_non_string_keys():
    key = object()
    cfg = Config({key: 1, 'a': {2: 'two'}})
    flat = cfg.flatten()
    assert flat[key] == 1
    assert flat['a'] == {2: 'two'}


def test_add_builds_a_new_config_and_right_wins():
    left = Config({'a/b': 1, 'a/c': 2})
    right = {'a/c': 20, 'd': 4}
    merged = left + right
    assert merged == {'a': {'b': 1, 'c': 20}, 'd': 4}
    assert left == {'a': {'b': 1, 'c': 2}}
    assert isinstance({'z': 0} + left, Config)
    assert ({'a/b': 5} + left)['a/b'] == 1


def test_add_does_not_share_nested_configs():
    left = Config({'a/b': 1})
    merged = left + {}
    merged['a']['b'] = 2
    assert left['a/b'] == 1


def test_copy_is_deep_for_configs_only():
    leaf = [1, 2]
    cfg = Config({'a/b': leaf})
    copied = cfg.copy()
    copied.put('a/c', 3)
    assert 'a/c' not in cfg
    assert copied['a/b'] is leaf


def test_equality_with_dicts_flat_or_nested():
    cfg = Config({'a/b': 1})
    assert cfg == {'a': {'b': 1}}
    assert cfg == {'a/b': 1}
    assert cfg != {'a/b': 2}
    assert cfg != 5


def test_keys_items_values():
    cfg = Config({'a/b': 1, 'c': 2})
    assert list(cfg.keys()) == ['a', 'c']
    assert dict(cfg.items())['c'] == 2
    assert len(list(cfg.values())) == 2


def test_non_string_keys_are_plain_keys():
    key = ('tuple', 'key')
    cfg = Config({key: 1, 3: 'three'})
    assert cfg[key] == 1
    assert cfg[3] == 'three'
    assert key in cfg


def test_repr_shows_the_nested_content():
    assert repr(Config({'a/b': 1})) == "Config({'a': {'b': 1}})"


def test_pickles_with_dill_and_pickle():
    cfg = Config({'a/b': 1, 'c': [1, 2]})
    assert dill.loads(dill.dumps(cfg)) == cfg
    restored = pickle.loads(pickle.dumps(cfg))
    assert isinstance(restored, Config) and isinstance(restored['a'], Config)


def test_double_kwargs_unpacking():
    def func(**kwargs):
        return kwargs
    assert func(**Config({'lr': 0.1}))['lr'] == 0.1


@pytest.mark.parametrize('bad', ['a/b', 5, (('a', 1),)])
def test_non_mapping_input_is_a_type_error(bad):
    with pytest.raises(TypeError, match='Expected a mapping'):
        Config(bad)


@pytest.mark.parametrize('key', ['a//b', '/a', 'a/', ''])
def test_malformed_keys_are_value_errors(key):
    with pytest.raises(ValueError, match=re.escape(repr(key))):
        Config({key: 1})


def test_path_through_a_value_is_an_error():
    cfg = Config({'a': 1})
    with pytest.raises(ValueError, match="'a' holds 1"):
        cfg.put('a/b', 2)
    with pytest.raises(ValueError, match="not a mapping"):
        Config({'a': 1, 'a/b': 2})


def test_missing_key_error_names_key_and_available_keys():
    cfg = Config({'model/loss': 'ce', 'model/lr': 0.1, 'device': 'cpu'})
    with pytest.raises(KeyError) as info:
        cfg['model/los']
    message = str(info.value)
    assert "'model/los'" in message and "'loss'" in message and "'lr'" in message
    with pytest.raises(KeyError, match="'device'"):
        cfg['devices']


def test_missing_key_through_a_value_says_so():
    cfg = Config({'a': 1})
    with pytest.raises(KeyError, match="'a' holds 1, not a mapping"):
        cfg['a/b']


def test_setdefault_and_inplace_or():
    cfg = Config()
    assert cfg.setdefault('a/b', 3) == 3
    assert cfg.setdefault('a/b', 4) == 3
    cfg |= {'a/c': 5}
    assert cfg == {'a/b': 3, 'a/c': 5}


# batchflow's forms of the same API


def test_list_of_pairs_builds_a_config_in_order():
    cfg = Config([('a/b', 1), ('a', {'c': 2}), ('d', Config({'e': 3}))])
    assert cfg.flatten() == {'a/b': 1, 'a/c': 2, 'd/e': 3}


@pytest.mark.parametrize('bad', [[1, 2], [('a', 0, 1)], [('a',)]])
def test_list_items_that_are_not_pairs_are_value_errors(bad):
    with pytest.raises(ValueError, match='key, value'):
        Config(bad)


def test_keys_values_items_flatten():
    cfg = Config({'a': {'b': 1, 'c': {'d': 2}}, 'e': 3})
    assert list(cfg.keys()) == ['a', 'e']
    assert list(cfg.keys(flatten=True)) == ['a/b', 'a/c/d', 'e']
    assert list(cfg.values(flatten=True)) == [1, 2, 3]
    assert list(cfg.items(flatten=True)) == [('a/b', 1), ('a/c/d', 2), ('e', 3)]
    assert list(cfg.items()) == [('a', {'b': 1, 'c': {'d': 2}}), ('e', 3)]
    assert dict(cfg) == {'a': {'b': 1, 'c': {'d': 2}}, 'e': 3}


def test_keys_read_as_attributes():
    cfg = Config({'a/b': 1, 'pop_size': 4})
    assert cfg.a.b == 1
    assert cfg.a.flatten() == {'b': 1}
    assert cfg.pop_size == 4
    assert cfg.pop('a/b') == 1          # methods win over keys of the same name
    with pytest.raises(AttributeError, match='missing'):
        _ = cfg.missing
    with pytest.raises(AttributeError):
        _ = cfg._private


def test_config_attribute_is_the_config_itself():
    cfg = Config({'key': {'sub': 1}})
    assert cfg.config is cfg
    cfg.config['key']['sub'] = 2
    assert cfg['key/sub'] == 2


def test_attribute_access_keeps_copy_and_pickle_working():
    import copy
    cfg = Config({'a/b': [1]})
    assert copy.deepcopy(cfg) == cfg
    assert pickle.loads(pickle.dumps(cfg)) == cfg
