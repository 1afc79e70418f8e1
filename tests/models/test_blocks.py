"""Blocks, network parts and ``Network`` by config, and ``TorchModel`` reading batchflow's network sections."""
import warnings

import numpy as np
import pytest
import torch

from flowpipe.models.torch import MLP, Network, ResNet, ResNet18, TorchModel
from flowpipe.models.torch.blocks import (Block, BottleneckBlock, ConvBlock, DenseBlock, Downsample, MBConvBlock,
                                          ResBlock, Upsample, VGGBlock)

X = (2, 8, 16, 16)


@pytest.mark.parametrize('block, shape', [
    (lambda: ResBlock(inputs=X, channels=16, downsample=True, n_reps=2, attention='se'), (16, 8, 8)),
    (lambda: ResBlock(inputs=X), (8, 16, 16)),
    (lambda: BottleneckBlock(inputs=X, channels=32, groups=2, downsample=2), (32, 8, 8)),
    (lambda: DenseBlock(inputs=X, num_layers=3, growth_rate=4, bottleneck=4), (20, 16, 16)),
    (lambda: DenseBlock(inputs=X, num_layers=3, growth_rate=4, skip=False), (12, 16, 16)),
    (lambda: MBConvBlock(inputs=X, channels=8, attention=True, n_reps=2, activation='silu'), (8, 16, 16)),
    (lambda: MBConvBlock(inputs=X, channels=12, stride=2), (12, 8, 8)),
    (lambda: VGGBlock(inputs=X, filters=12, depth3=2, depth1=1), (12, 16, 16)),
    (lambda: Upsample(inputs=X, layout='t'), (8, 32, 32)),
    (lambda: Upsample(inputs=X, shape=(20, 20)), (8, 20, 20)),
    (lambda: Downsample(inputs=X, layout='c', factor=4), (8, 4, 4)),
    (lambda: Block({'layout': 'cna', 'channels': 4}, {'layout': 'p'}, inputs=X, n_repeats=2), (4, 4, 4)),
    (lambda: ConvBlock(inputs=X, layout='cna', channels='same*2'), (16, 16, 16)),
])
def test_blocks_shape(block, shape):
    assert tuple(block()(torch.rand(3, 8, 16, 16)).shape) == (3, *shape)


def test_a_residual_block_is_its_layout_plus_the_shortcut():
    block = ResBlock(inputs=X, layout='cna c', op='+')
    x = torch.rand(2, 8, 16, 16)
    layers = block.parts[0].layers
    assert torch.allclose(block(x), x + layers[4](layers[3](layers[2](layers[1](x)))))
    counts = [sum(isinstance(m, torch.nn.Conv2d) for m in b.modules())
              for b in (ResBlock(inputs=X, channels=8), ResBlock(inputs=X, channels=16))]
    assert counts == [2, 3]         # a projection shortcut only where the channels change


def test_a_dense_block_concatenates_every_layer():
    block = DenseBlock(inputs=X, num_layers=2, growth_rate=3, layout='c', dropout_rate=0)
    x = torch.rand(2, 8, 16, 16)
    first = block.layers[0](x)
    assert torch.equal(block(x), torch.cat([x, first, block.layers[1](torch.cat([x, first], 1))], 1))


UNET = {'order': ['initial_block', 'encoder', 'embedding', 'decoder', 'head'],
        'initial_block': {'layout': 'cna', 'channels': 4},
        'encoder': {'type': 'encoder', 'num_stages': 2, 'order': ['block', 'skip', 'downsampling'],
                    'blocks': {'layout': 'cna cna', 'channels': [4, 8]}},
        'embedding': {'input_type': 'list', 'output_type': 'list', 'layout': 'cna', 'channels': 16},
        'decoder': {'type': 'decoder', 'order': ['upsampling', 'combine', 'block'],
                    'blocks': {'layout': 'cna', 'channels': [8, 4]}},
        'head': {'layout': 'c', 'channels': 3, 'kernel_size': 1}}


def test_a_network_by_order_joins_encoder_skips_in_the_decoder():
    network = Network((2, 1, 16, 16), UNET)
    assert network.order == UNET['order'] and isinstance(network.decoder, torch.nn.Module)
    assert tuple(network(torch.rand(2, 1, 16, 16)).shape) == (2, 3, 16, 16)
    joins = [m for m in network.decoder.stages if type(m).__name__ == 'Combine']
    assert len(joins) == 2
    first_block = network.decoder.stages[2]
    assert next(m for m in first_block.modules() if isinstance(m, torch.nn.Conv2d)).in_channels == 16 + 8


MLP_DECODER = {**UNET, 'order': ['initial_block', 'encoder', 'decoder', 'head'],
               'decoder': {'type': 'mlp-decoder', 'upsample': {'channels': [4, 4, 8]}, 'block': {'channels': 6}}}


def test_an_mlp_decoder_brings_every_tensor_to_one_size_joins_and_mixes_them():
    network = Network((2, 1, 16, 16), MLP_DECODER)
    decoder = network.decoder
    assert [name for name, _ in decoder.named_children()] == ['upsample0', 'upsample1', 'upsample2', 'combine', 'block']
    x = torch.rand(2, 1, 16, 16)
    network.eval()
    tensors = network.encoder(network.initial_block(x))          # skips of 16x16 and 8x8, the last 4x4
    resized = [decoder.upsample0(tensors[0]), decoder.upsample1(tensors[1]), decoder.upsample2(tensors[2])]
    assert [tuple(t.shape) for t in resized] == [(2, 4, 16, 16), (2, 4, 16, 16), (2, 8, 16, 16)]
    assert torch.equal(decoder(tensors), decoder.block(torch.cat(resized, 1)))
    assert tuple(network(x).shape) == (2, 3, 16, 16)


def test_an_mlp_decoder_takes_one_tensor_a_size_and_refuses_another_count():
    decoder = Network((2, 4, 8, 8), {'body': {'type': 'mlpdecoder', 'size': (12, 10)}}).body
    assert tuple(decoder(torch.rand(3, 4, 8, 8)).shape) == (3, 4, 12, 10)
    with pytest.raises(ValueError, match=r'Expected 1 tensor\(s\) into the mlp-decoder.*Received: 2'):
        decoder([torch.rand(3, 4, 8, 8), torch.rand(3, 4, 8, 8)])


def test_a_segmenter_with_an_mlp_decoder_trains():
    config = {key: value for key, value in MLP_DECODER.items() if key not in ('head', 'embedding')}
    model = TorchModel({**config, 'inputs/images/shape': (1, 16, 16), 'inputs/masks/classes': 3,
                        'head': {'layout': 'c', 'kernel_size': 1}})
    images = np.random.default_rng(0).random((4, 1, 16, 16)).astype('float32')
    masks = np.random.default_rng(1).integers(0, 3, (4, 16, 16))
    assert np.isfinite(model.train(images, masks, fetches='loss'))
    assert model.predict(images).shape == (4, 3, 16, 16)


@pytest.mark.parametrize('section, error, match', [
    ({'type': 'timm'}, ValueError, "type='timm'.*does not load networks of timm.*nn.Module"),
    ({'type': 'hugging-face'}, ValueError, "type='hugging-face'.*timm or Hugging Face"),
    ({'type': 'decoderx'}, ValueError, "part type among"),
    ({'type': 'encoder'}, ValueError, "num_stages as a positive int"),
    ({'type': 'encoder', 'num_stages': 1, 'order': 'bx'}, ValueError, "order as letters"),
    ('cna', TypeError, "section 'body' as a dict"),
])
def test_bad_sections_are_refused(section, error, match):
    with pytest.raises(error, match=match):
        Network((2, 1, 8, 8), {'body': section})


BASE = {'inputs_shapes': (3, 16, 16), 'classes': 4, 'loss': 'ce'}
DATA = np.random.default_rng(0).random((8, 3, 16, 16)).astype('float32'), np.arange(8) % 4


def _step(model):
    return model.train(*DATA, fetches='loss')


def test_torch_model_builds_its_sections_and_the_head_gets_the_classes():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        model = TorchModel({**BASE, 'initial_block': {'layout': 'cna p', 'channels': 8, 'pool_size': 3,
                                                      'pool_stride': 2, 'padding': 1},
                            'body': {'layout': 'cna cna', 'channels': [16, 32]},
                            'head': {'layout': 'Vdf', 'dropout_rate': 0.2}, 'common/conv/bias': True})
    assert np.isfinite(_step(model))
    linear = [m for m in model.model.head.modules() if isinstance(m, torch.nn.Linear)]
    assert linear[0].out_features == 4
    assert all(m.bias is not None for m in model.model.modules() if isinstance(m, torch.nn.Conv2d))


def test_without_a_shape_the_sections_are_built_at_the_first_step():
    model = TorchModel({'classes': 4, 'loss': 'ce', 'body': {'layout': 'cnaV', 'channels': 8},
                        'head': {'layout': 'f'}})
    assert model.engine is None
    assert np.isfinite(_step(model)) and model.model.body.block.parts[0].layers[0].layer.in_channels == 3


def test_order_names_more_sections_without_unknown_key_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        model = TorchModel({'inputs_shapes': (1, 16, 16), 'targets_shapes': (3, 16, 16), 'loss': 'mse', **UNET})
    loss = model.train(np.random.rand(2, 1, 16, 16).astype('float32'), np.random.rand(2, 3, 16, 16).astype('float32'),
                       fetches='loss')
    assert np.isfinite(loss) and list(dict(model.model.named_children())) == UNET['order']


@pytest.mark.parametrize('layout, features', [('f', [10]), ('faf', [100, 10])])
def test_a_ready_network_takes_a_layout_head(layout, features):
    # batchflow's research tests train ResNet with 'head/layout' and 'head/features'
    model = ResNet({'head/layout': layout, 'head/features': features, 'classes': 10, 'loss': 'ce', 'device': 'cpu',
                    'amp': False})
    assert np.isfinite(model.train(DATA[0], np.arange(8), fetches='loss'))
    linears = [m.out_features for m in model.model.head.modules() if isinstance(m, torch.nn.Linear)]
    assert linears == features


def test_a_ready_network_refuses_mixed_sections_and_a_lone_earlier_part():
    with pytest.raises(ValueError, match=r"'head' either with the options.*\['layout'\]"):
        ResNet18({**BASE, 'head/dropout': 0.2, 'head/layout': 'Vf'})
    with pytest.raises(ValueError, match=r"'body' either with the options.*\['layout'\]"):
        MLP({**BASE, 'body': {'layout': 'fa', 'units': 8}})         # MLP reads body/units
    with pytest.raises(ValueError, match="after a replaced 'body'.*'head/layout'"):
        MLP({**BASE, 'body': {'layout': 'fa', 'features': 8}})
    model = MLP({**BASE, 'body': {'layout': 'fa', 'features': 8}, 'head': {'layout': 'f'}})
    assert np.isfinite(_step(model))


def test_a_network_by_sections_saves_and_loads(tmp_path):
    config = {**BASE, 'body': {'type': 'encoder', 'num_stages': 2, 'order': 'bd', 'output_type': 'tensor',
                               'blocks': {'base_block': ResBlock, 'channels': [8, 16]}}, 'head': {'layout': 'Vf'}}
    model = TorchModel(config)
    _step(model)
    model.save(str(tmp_path / 'model.pkl'))
    loaded = TorchModel.from_file(str(tmp_path / 'model.pkl'))
    assert np.array_equal(model.predict(DATA[0]), loaded.predict(DATA[0]))


@pytest.mark.parametrize('placement', [{'microbatch': 2}, {'device': ['CPU:0', 'CPU:1'], 'microbatch': 2}])
def test_a_layout_network_with_dropout_trains_as_on_one_device(placement, default_dtype):
    config = {**BASE, 'body': {'layout': 'cad cad', 'channels': [4, 8], 'dropout_rate': 0.3},
              'head': {'layout': 'Vf'}}
    models = []
    for extra in ({}, placement):
        torch.manual_seed(0)
        model = TorchModel({**config, **extra})
        for seed in (1, 2):
            model.train(*DATA, seed=seed)
        models.append(model)
    exact = default_dtype == torch.float64          # the sums over pieces differ only by rounding
    for one, other in zip(models[0].model.parameters(), models[1].model.parameters()):
        assert one.dtype == default_dtype
        torch.testing.assert_close(one, other, rtol=1e-10 if exact else 1e-5, atol=1e-12 if exact else 1e-6)
