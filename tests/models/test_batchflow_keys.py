"""batchflow's model config keys: each either does what batchflow does or is refused naming itself and the fix."""
import warnings

import numpy as np
import pytest
import torch

from flowpipe.models.torch import MLP, SimpleCNN, SimpleCNNNetwork, TorchModel
from flowpipe.models.torch.batchflow_keys import REFUSED, apply_init_weights, resnet_init
from flowpipe.models.torch.config import TOP_KEYS, parse_config

BASE = {'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 3, 'initial_block/inputs': 'images'}

#: every key batchflow 0.10.1's TorchModel reads from its config (its default_config and its code)
BATCHFLOW_KEYS = ('amp', 'device', 'benchmark', 'channels_last', 'microbatch', 'microbatch_size', 'sync_frequency',
                  'profile', 'order', 'trainable', 'initial_block', 'body', 'head', 'common', 'output',
                  'inputs_shapes', 'input_shapes', 'targets_shapes', 'target_shapes', 'classes',
                  'placeholder_batch_size', 'loss', 'optimizer', 'decay', 'gradient_clipping', 'weights_averaging',
                  'wa', 'swa', 'sam_rho', 'sam_individual_norm', 'callbacks', 'model', 'init_weights', 'load')
ALIASES = ('microbatch_size', 'channels_last', 'inputs_shapes', 'input_shapes', 'targets_shapes', 'target_shapes',
           'classes')


def test_every_batchflow_key_is_read_aliased_or_refused():
    for key in BATCHFLOW_KEYS:
        assert (key in TOP_KEYS) + (key in ALIASES) + (key in REFUSED) == 1, key


@pytest.mark.parametrize('key, value, fix', [
    ('sync_frequency', 4, "'microbatch'"),
    ('load', {'path': 'model.pkl'}, 'TorchModel.from_file'),
])
def test_a_refused_key_names_itself_and_the_fix(key, value, fix):
    with pytest.raises(ValueError, match=f"'{key}'") as caught:
        MLP({**BASE, key: value})
    assert fix in str(caught.value) and repr(value) in str(caught.value)


@pytest.mark.parametrize('key, value', [('sync_frequency', 1), ('order', ['initial_block', 'body', 'head']),
                                        ('trainable', None), ('load', None)])
def test_batchflow_defaults_of_refused_keys_change_nothing_and_pass(key, value):
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        MLP({**BASE, key: value})


def test_a_ready_network_refuses_another_order_and_a_section_of_another_type():
    with pytest.raises(ValueError, match=r"'order'.*order=\['body', 'head'\].*TorchModel"):
        MLP({**BASE, 'order': ['body', 'head']})
    with pytest.raises(TypeError, match="section 'body' as a dict.*body='cna'"):
        MLP({**BASE, 'body': 'cna'})
    network = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3))
    TorchModel({**BASE, 'model': network, 'body/layout': 'cna'})     # batchflow reads no blocks with a model


def test_a_class_that_reads_a_section_lists_it():
    class Own(TorchModel):
        config_keys = ('body',)

        def build_network(self, spec):
            return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, spec.get('body/width')))

    assert Own({**BASE, 'body/width': 3}).model[1].out_features == 3


@pytest.mark.parametrize('device', ['CPU:0', ['CPU:0', 'CPU:1']])
def test_trainable_freezes_the_other_parts(device):
    model = SimpleCNN({**BASE, 'trainable': ['head'], 'device': device})
    frozen = {name: p.detach().clone() for name, p in model.model.named_parameters()}
    model.train(np.random.rand(8, 1, 8, 8).astype('float32'), np.arange(8) % 3)
    changed = {name for name, p in model.model.named_parameters() if not torch.equal(p, frozen[name])}
    assert changed and all(name.startswith('head.') for name in changed)
    with pytest.raises(ValueError, match=r"'trainable' as names of the network's parts.*'neck'"):
        SimpleCNN({**BASE, 'trainable': ['neck']})


def test_channels_last_input_shapes_and_targets_shapes_are_aliases():
    spec = parse_config({'channels_last': True, 'input_shapes': [(1, 8, 8)], 'targets_shapes': (2,)})
    assert spec.get('memory_format') == 'channels_last' and spec.shapes == {'images': (1, 8, 8), 'targets': (2,)}
    assert spec.input_names == ('images',) and spec.num_outputs == 2
    with pytest.raises(ValueError, match='memory_format or channels_last'):
        parse_config({'channels_last': True, 'memory_format': 'contiguous'})
    with pytest.raises(ValueError, match="one shape in 'inputs_shapes'"):
        parse_config({'inputs_shapes': [(1, 8, 8), (3,)]})


def test_init_weights_forms():
    torch.manual_seed(0)
    model = SimpleCNN({**BASE, 'init_weights': [('resnet', 'body'), lambda module: None]})
    torch.manual_seed(0)
    network = SimpleCNNNetwork((1, 8, 8), 3)
    network.body.apply(resnet_init)
    state = model.model.state_dict()
    assert all(torch.equal(state[key], value) for key, value in network.state_dict().items())
    zero = lambda module: [torch.nn.init.zeros_(p) for p in module.parameters(recurse=False)]
    model = MLP({**BASE, 'init_weights': zero})
    assert all(not p.any() for p in model.model.parameters())
    with pytest.raises(ValueError, match="part of 'init_weights'.*'nope'"):
        apply_init_weights(model.model, (zero, 'nope'))
    with pytest.raises(ValueError, match="'init_weights' as a callable"):
        MLP({**BASE, 'init_weights': 'xavier'})


def test_benchmark_is_checked_and_unknown_keys_still_warn():
    with pytest.raises(TypeError, match="'benchmark' as True or False"):
        MLP({**BASE, 'benchmark': 'yes'})
    MLP({**BASE, 'benchmark': False, 'placeholder_batch_size': 4})
    with pytest.warns(UserWarning, match="'my_note'"):
        MLP({**BASE, 'my_note': 'run 3'})


def test_a_ported_config_trains():
    config = {'inputs_shapes': (1, 8, 8), 'classes': 3, 'microbatch_size': 8, 'sync_frequency': 1,
              'order': ['initial_block', 'body', 'head'], 'output': None, 'benchmark': True,
              'placeholder_batch_size': 2, 'init_weights': 'best_practice_resnet', 'gradient_clipping': 1.0}
    model = SimpleCNN(config)
    loss = model.train(np.random.rand(16, 1, 8, 8).astype('float32'), np.arange(16) % 3, fetches='loss')
    assert np.isfinite(loss)
