"""The layout language: letters, their parameters, lists spread over letters, branches; layers sized by an example."""
import numpy as np
import pytest
import torch

from flowpipe.models.torch.layers import (LETTERS, REFUSED_LETTERS, AvgPool, Dense, Flatten, GlobalAvgPool,
                                          GlobalMaxPool, MaxPool, MultiLayer)
from flowpipe.models.torch.layers.shapes import resolve_channels

pytestmark = pytest.mark.usefixtures('default_dtype')

X = (2, 3, 8, 8)


@pytest.mark.parametrize('layout, kwargs, shape', [
    ('c', {'channels': 5}, (5, 8, 8)),
    ('c', {'filters': 5, 'strides': 2}, (5, 4, 4)),
    ('t', {'channels': 4, 'kernel_size': 3, 'stride': 2}, (4, 16, 16)),
    ('C', {'channels': 6}, (6, 8, 8)),
    ('T', {'channels': 6, 'stride': 2}, (6, 16, 16)),
    ('w', {'kernel_size': 5}, (3, 8, 8)),
    ('W', {'stride': 2}, (3, 16, 16)),
    ('n', {}, (3, 8, 8)),
    ('a', {'activation': 'gelu'}, (3, 8, 8)),
    ('d', {'dropout_rate': 0.5}, (3, 8, 8)),
    ('D', {'dropout_rate': 0.5}, (3, 8, 8)),
    ('p', {'pool_size': 3, 'pool_strides': 3}, (3, 3, 3)),
    ('v', {}, (3, 4, 4)),
    ('P', {}, (3,)),
    ('V', {}, (3,)),
    ('f', {'units': 7}, (7,)),
    ('b', {'factor': 2}, (3, 16, 16)),
    ('X', {'factor': 1}, (3, 8, 8)),
    ('x', {'factor': 2}, (12, 4, 4)),
    ('Vf>', {'features': 4}, (4, 1)),
    ('r', {'reshape_to': (3, 64)}, (3, 64)),
    ('S', {'ratio': 1}, (3, 8, 8)),
    ('R+', {}, (3, 8, 8)),
    ('B|', {}, (6, 8, 8)),
    ('R*', {}, (3, 8, 8)),
])
def test_each_letter_makes_its_layer(layout, kwargs, shape, default_dtype):
    layer = MultiLayer(inputs=X, layout=layout, **kwargs)
    out = layer(torch.rand(5, 3, 8, 8))
    assert tuple(out.shape) == (5, *shape)
    assert all(p.dtype == default_dtype for p in layer.parameters())


def test_the_table_covers_every_documented_letter_once():
    documented = set('afndDctCTwWpvPVbXx>rRB+|*S')
    assert set(LETTERS) == documented and not documented & set(REFUSED_LETTERS)


@pytest.mark.parametrize('layout, match', [('cnaK', r"'K'.*multi-kernel"), ('cu', r"Received: 'u'.*write 'b'"),
                                           ('cl', "normalization_type='layer'"), ('c!', r"'!'.*use '\+'")])
def test_letters_not_made_are_refused_by_name(layout, match):
    with pytest.raises(ValueError, match=match):
        MultiLayer(inputs=X, layout=layout, channels=4)


def test_a_misspelt_parameter_names_the_close_one():
    with pytest.raises(ValueError, match=r"kernal_size=3.*'kernel_size'"):
        MultiLayer(inputs=X, layout='c', channels=4, kernal_size=3)
    with pytest.raises(ValueError, match="'features' \\(or 'units'\\)"):
        MultiLayer(inputs=X, layout='f')
    with pytest.raises(ValueError, match="branch start"):
        MultiLayer(inputs=X, layout='c+', channels=3)


def test_lists_spread_over_a_group_tuples_and_short_lists_go_to_all():
    layer = MultiLayer(inputs=X, layout='cna t cna', channels=[4, 5, 6], kernel_size=(3, 1), stride=[1, 2, 1])
    convs = [module for module in layer.modules() if isinstance(module, (torch.nn.Conv2d, torch.nn.ConvTranspose2d))]
    assert [conv.out_channels for conv in convs] == [4, 5, 6]
    assert all(conv.kernel_size == (3, 1) for conv in convs) and [c.stride for c in convs][1] == (2, 2)
    assert tuple(layer(torch.rand(1, 3, 8, 8)).shape) == (1, 6, 16, 16)


def test_a_layer_dict_reaches_only_its_letters():
    layer = MultiLayer(inputs=X, layout='cn cn', channels=4, conv={'bias': True}, batch_norm={'momentum': 0.5})
    convs = [m for m in layer.modules() if isinstance(m, torch.nn.Conv2d)]
    norms = [m for m in layer.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert all(conv.bias is not None for conv in convs) and all(norm.momentum == 0.5 for norm in norms)


@pytest.mark.parametrize('value, channels', [('same', 6), ('S', 6), ('same*2', 12), ('same//4', 1), ('2*same', 12),
                                             ('same/2', 3), (5, 5)])
def test_channels_from_the_input(value, channels):
    assert resolve_channels(value, 6) == channels


def test_bad_channels_are_refused():
    with pytest.raises(ValueError, match="Received: channels='twice'"):
        MultiLayer(inputs=X, layout='c', channels='twice')


def test_a_residual_branch_adds_the_input_and_a_branch_layout_projects_it():
    layer = MultiLayer(inputs=X, layout='R c +', channels=3)
    x = torch.rand(2, 3, 8, 8)
    assert torch.allclose(layer(x), x + layer.layers[1](x))
    projected = MultiLayer(inputs=X, layout='R cn +', channels=8, branch={'layout': 'c', 'channels': 8,
                                                                          'kernel_size': 1})
    assert tuple(projected(x).shape) == (2, 8, 8, 8)
    with pytest.raises(ValueError, match=r"same channels to sum.*\[3, 8\]"):
        MultiLayer(inputs=X, layout='R cn +', channels=8)


def test_building_changes_no_statistics_and_draws_no_dropout_masks():
    torch.manual_seed(0)
    layer = MultiLayer(inputs=torch.rand(X) + 5, layout='cnad', channels=4, dropout_rate=0.5)
    norm = layer.layers[1].layer
    assert not norm.running_mean.any() and int(norm.num_batches_tracked) == 0 and layer.training
    torch.manual_seed(0)
    torch.nn.Conv2d(3, 4, 3, padding=1, bias=False)        # the only random numbers drawn: the weights
    assert torch.equal(torch.rand(3), (torch.manual_seed(0), MultiLayer(inputs=X, layout='cnad', channels=4,
                                                                        dropout_rate=0.5), torch.rand(3))[2])


def test_same_padding_gives_ceil_of_size_over_stride():
    for size in (7, 8, 9):
        for stride in (1, 2, 3):
            out = MultiLayer(inputs=(1, 1, size), layout='c', channels=1, kernel_size=3, stride=stride)
            assert out(torch.rand(1, 1, size)).shape[-1] == -(-size // stride)


# the values batchflow's own pooling tests expect (its torch_layers_test.py)
@pytest.mark.parametrize('layer, kwargs, expected', [
    (MaxPool, dict(pool_size=3, pool_stride=3, padding='same'), [1, 4, 7, 9, 12, 15]),
    (MaxPool, dict(pool_size=3, pool_stride=3, padding='valid'), [2, 5, 10, 13]),
    (MaxPool, dict(pool_size=4, pool_stride=4, padding=2), [1, 5, 7, 9, 13, 15]),
    (AvgPool, dict(pool_size=3, pool_stride=3, padding='same'), [1 / 3, 3, 6, 17 / 3, 11, 14]),
    (AvgPool, dict(pool_size=3, pool_stride=3, padding='valid'), [1, 4, 9, 12]),
    (AvgPool, dict(pool_size=4, pool_stride=4, padding=2), [0.25, 3.5, 3.25, 4.25, 11.5, 7.25]),
])
def test_pooling_values(layer, kwargs, expected):
    x = torch.arange(16.).reshape(2, 1, -1)
    assert torch.allclose(layer(inputs=x, **kwargs)(x).flatten(), torch.tensor(expected, dtype=x.dtype))


@pytest.mark.parametrize('shape', [(-1,), (-1, 2), (-1, 2, 2)])
def test_global_pooling(shape):
    x = torch.arange(16.).reshape(2, 1, *shape)
    assert GlobalMaxPool(inputs=x)(x).tolist() == [[7], [15]]
    assert GlobalAvgPool(inputs=x)(x).tolist() == [[3.5], [11.5]]


@pytest.mark.parametrize('shape, keep, out', [((2, 1), 0, (2,)), ((3, 2, 1), 1, (3, 2)), ((3, 2, 1), 2, (2, 3)),
                                              ((3, 2, 1), (1, 2, 3), (3, 2, 1)), ((3, 2, 1), 3, (1, 6))])
def test_flatten_keeps_axes(shape, keep, out):
    assert Flatten(keep)(torch.zeros(2, *shape)).shape[1:] == out
    with pytest.raises(ValueError, match='axis 3'):
        Flatten(3)(torch.zeros(2, 2, 1))


def test_dense_reads_the_flattened_size_and_activations_take_modules_and_callables():
    assert Dense(5, inputs=X).linear.in_features == 192
    layer = MultiLayer(inputs=X, layout='a a', activation=[torch.nn.Tanh(), torch.square])
    x = torch.rand(2, 3, 8, 8) - 0.5
    assert torch.allclose(layer(x), torch.tanh(x) ** 2)
    with pytest.raises(ValueError, match="activation='relux'"):
        MultiLayer(inputs=X, layout='a', activation='relux')
    assert np.isclose(float(MultiLayer(inputs=X, layout='a', activation='leakyrelu',
                                       activation_layer={'negative_slope': 0.5})(-torch.ones(1, 3, 8, 8)).mean()),
                      -0.5)
