"""Model config parsing: '/' paths and nested dicts, inputs and targets, clear errors."""
import pytest

from flowpipe.config import Config
from flowpipe.models.torch.config import nest, parse_config

PATHS = {'inputs/images/shape': (3, 8, 8), 'inputs/labels/classes': 10, 'initial_block/inputs': 'images',
         'optimizer': {'name': 'SGD', 'lr': 0.1}}


def test_paths_nested_dicts_and_config_give_the_same_spec():
    nested = {'inputs': {'images': {'shape': (3, 8, 8)}, 'labels': {'classes': 10}},
              'initial_block': {'inputs': 'images'}, 'optimizer': {'name': 'SGD', 'lr': 0.1}}
    specs = [parse_config(PATHS), parse_config(nested), parse_config(Config(PATHS))]
    assert all(spec.config == specs[0].config for spec in specs)
    assert specs[0].get('optimizer') == {'name': 'SGD', 'lr': 0.1}


def test_inputs_targets_shapes_and_classes():
    spec = parse_config(PATHS)
    assert spec.input_names == ('images',) and spec.target_names == ('labels',)
    assert spec.input_shape == (3, 8, 8) and spec.num_outputs == 10


def test_network_inputs_default_to_inputs_without_classes():
    spec = parse_config({'inputs/x/shape': (4,), 'inputs/y/classes': ['a', 'b', 'c']})
    assert spec.input_names == ('x',) and spec.target_names == ('y',) and spec.num_outputs == 3


def test_regression_target_sizes_the_head_by_its_shape():
    spec = parse_config({'inputs/x/shape': (4,), 'inputs/y/shape': (2,), 'initial_block/inputs': 'x'})
    assert spec.num_outputs == 2


def test_later_paths_merge_into_earlier_sections():
    assert nest({'inputs': {'x': {'shape': (1,)}}, 'inputs/x/classes': 2}) == {'inputs': {'x': {'shape': (1,),
                                                                                                  'classes': 2}}}


def test_missing_input_shape_names_the_key_to_set():
    spec = parse_config({'inputs/labels/classes': 10, 'initial_block/inputs': 'images', 'inputs/images': {}})
    with pytest.raises(ValueError, match="inputs/images/shape"):
        spec.input_shape


def test_unknown_initial_block_input():
    with pytest.raises(ValueError, match="'imgs'"):
        parse_config({**PATHS, 'initial_block/inputs': 'imgs'})


def test_misspelt_top_key_suggests_the_right_one():
    with pytest.raises(ValueError, match="optimizer"):
        parse_config({**PATHS, 'optimiser': 'Adam'})


@pytest.mark.parametrize('classes, error', [(0, ValueError), ('ten', TypeError), (True, TypeError)])
def test_bad_classes(classes, error):
    with pytest.raises(error, match='inputs/labels/classes'):
        parse_config({**PATHS, 'inputs/labels/classes': classes})


def test_bad_shape_and_bad_config_type():
    with pytest.raises(TypeError, match='inputs/images/shape'):
        parse_config({**PATHS, 'inputs/images/shape': 'big'})
    with pytest.raises(TypeError, match='dict or flowpipe.Config'):
        parse_config([('a', 1)])
