"""The zoo on the layout language: every class builds and takes a training step on a tiny input (widths made
small by config, depths as the class gives them), and one class per family trains on two CPU replicas with
micro-batches."""
import warnings

import numpy as np
import pytest
import torch

from flowpipe.models.torch import (VGG16, VGG19, DenseNet121, DenseNet169, DenseNet201, DenseNet264, DenseUNet,
                                   EfficientNetB0, EfficientNetB1, EfficientNetB2, EfficientNetB3, EfficientNetB4,
                                   EfficientNetB5, EfficientNetB6, EfficientNetB7, EncoderDecoder, ResNet50, ResNet101,
                                   ResNet152, ResNeXt18, ResNeXt34, ResNeXt50, ResNeXt101, ResNeXt152, ResUNet,
                                   SEResNet18, SEResNet34, SEResNet50, SEResNet101, SEResNet152, SEResNeXt18,
                                   SEResNeXt34, SEResNeXt50, SEResNeXt101, SEResNeXt152, UNet)
from flowpipe.models.torch.zoo.efficientnet import _width

_VGG = {'body/blocks/channels': [4, 4, 8, 8, 8]}
_RES = {'initial_block/channels': 8, 'body/blocks/channels': [16, 16, 32, 32]}
_NEXT = {**_RES, 'body/blocks/groups': 4}     # 32 groups need 32 inner channels: see the defaults test
_SE = {'initial_block/channels': 8, 'body/blocks/channels': [8, 8, 16, 16]}
_SE_NEXT = {**_SE, 'body/blocks/groups': 4}
_DENSE = {'initial_block/channels': 8, 'body/blocks/growth_rate': 2}
_EFF = {'initial_block/channels': 8, 'body/blocks/channels': [8] * 7, 'head/channels': 16}
_SEG = {'initial_block': {'layout': 'cna', 'channels': 4}, 'encoder/blocks/channels': [4, 8, 8, 8],
        'embedding/channels': 8, 'decoder/blocks/channels': [8, 8, 8, 4]}
_DENSE_SEG = {'initial_block': {'layout': 'cna', 'channels': 4}, 'encoder/blocks/growth_rate': 2,
              'encoder/blocks/num_layers': 2, 'embedding/channels': 8, 'decoder/blocks/growth_rate': 2,
              'decoder/blocks/num_layers': 2}
_ENC = {'encoder/blocks/channels': [4, 4, 8], 'embedding/channels': 8, 'decoder/blocks/channels': [8, 4, 4]}

CLASSIFIERS = [(VGG16, _VGG), (VGG19, _VGG), (ResNet50, _RES), (ResNet101, _RES), (ResNet152, _RES),
               (ResNeXt50, _NEXT), (ResNeXt101, _NEXT), (ResNeXt152, _NEXT), (SEResNet18, _SE), (SEResNet34, _SE),
               (SEResNet50, _RES), (SEResNet101, _RES), (SEResNet152, _RES), (SEResNeXt50, _NEXT),
               (SEResNeXt101, _NEXT), (SEResNeXt152, _NEXT), (ResNeXt18, _SE_NEXT), (ResNeXt34, _SE_NEXT),
               (SEResNeXt18, _SE_NEXT), (SEResNeXt34, _SE_NEXT), (DenseNet121, _DENSE), (DenseNet169, _DENSE),
               (DenseNet201, _DENSE), (DenseNet264, _DENSE), (EfficientNetB0, _EFF), (EfficientNetB1, _EFF),
               (EfficientNetB2, _EFF), (EfficientNetB3, _EFF), (EfficientNetB4, _EFF), (EfficientNetB5, _EFF),
               (EfficientNetB6, _EFF), (EfficientNetB7, _EFF)]
SEGMENTERS = [(UNet, _SEG), (ResUNet, _SEG), (DenseUNet, _DENSE_SEG), (EncoderDecoder, _ENC)]


def _images(n=4, side=16, channels=3):
    return np.random.default_rng(0).random((n, channels, side, side)).astype('float32')


def _step(model_class, options, n=4, **config):
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')     # batch norm on small pieces warns in the replicated runs
        model = model_class({'inputs_shapes': (3, 16, 16), 'classes': 5, **options, **config})
        before = [p.detach().clone() for p in model.model.parameters()]
        loss = model.train(_images(n), np.arange(n) % 5, fetches='loss')
    assert np.isfinite(loss)
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.model.parameters()))
    return model


@pytest.mark.parametrize('model_class, options', CLASSIFIERS, ids=[c.__name__ for c, _ in CLASSIFIERS])
def test_each_classifier_builds_and_trains_a_step(model_class, options):
    model = _step(model_class, options)
    assert model.predict(_images(2)).shape == (2, 5)


def _masks(n, side=16):
    return (np.random.default_rng(1).random((n, side, side)) > 0.5).astype('int64')


@pytest.mark.parametrize('model_class, options', SEGMENTERS, ids=[c.__name__ for c, _ in SEGMENTERS])
def test_each_segmenter_builds_and_trains_a_step(model_class, options):
    model = model_class({'inputs/images/shape': (1, 16, 16), 'inputs/masks/classes': 2, **options})
    loss = model.train(_images(2, 16, 1), _masks(2), fetches='loss')
    assert np.isfinite(loss) and model.predict(_images(2, 16, 1)).shape == (2, 2, 16, 16)


FAMILIES = [(VGG16, _VGG), (ResNet50, _RES), (SEResNeXt50, _NEXT), (DenseNet121, _DENSE), (EfficientNetB0, _EFF)]


@pytest.mark.parametrize('model_class, options', FAMILIES, ids=[c.__name__ for c, _ in FAMILIES])
def test_each_family_trains_on_two_replicas_with_micro_batches(model_class, options):
    model = _step(model_class, options, n=8, device=['CPU:0', 'CPU:1'], microbatch=4)
    assert len(model.engine.plan.devices) == 2


def test_unet_trains_on_two_replicas_with_micro_batches():
    model = UNet({'inputs/images/shape': (1, 16, 16), 'inputs/masks/classes': 2, 'device': ['CPU:0', 'CPU:1'],
                  'microbatch': 4, **_SEG})
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        assert np.isfinite(model.train(_images(8, 16, 1), _masks(8), fetches='loss'))


def test_default_configs_are_the_papers():
    resnet = ResNet50.default_config()['body']['blocks']
    assert resnet['n_reps'] == [3, 4, 6, 3] and resnet['channels'] == [256, 512, 1024, 2048]
    assert ResNet152.default_config()['body']['blocks']['n_reps'] == [3, 8, 36, 3]
    assert ResNeXt50.default_config()['body']['blocks']['groups'] == 32
    basic = SEResNeXt34.default_config()['body']['blocks']                 # batchflow's: ResNet34 with 32 groups
    assert basic['base_block'] is SEResNet34.BLOCK and basic['groups'] == 32 and basic['attention'] == 'se'
    assert ResNeXt18.default_config()['body']['blocks']['n_reps'] == [2, 2, 2, 2]
    assert DenseNet264.default_config()['body']['blocks']['num_layers'] == [6, 12, 64, 48]
    assert VGG19.default_config()['body']['blocks']['depth3'] == [2, 2, 4, 4, 4]
    b7 = EfficientNetB7.default_config()['body']['blocks']
    assert b7['channels'][0] == 32 and b7['n_reps'] == [4, 7, 7, 10, 10, 13, 4] and EfficientNetB7.resolution == 600
    assert [_width(c, 1.1) for c in (16, 24, 40, 80, 112, 192, 320)] == [16, 24, 48, 88, 120, 208, 352]
    unet = UNet.default_config()
    assert unet['encoder']['blocks']['channels'] == [64, 128, 256, 512] and unet['embedding']['channels'] == 1024


def test_a_zoo_config_merges_the_users_sections():
    model = ResNet50({'inputs_shapes': (3, 16, 16), 'classes': 5, **_RES, 'head/layout': 'Vdf',
                      'head/dropout_rate': 0.5})
    dropouts = [m for m in model.model.head.modules() if isinstance(m, torch.nn.Dropout)]
    assert [m.p for m in dropouts] == [0.5]
    blocks = model.model.body.stages
    assert len(blocks) == 4 and model.config['body']['blocks']['n_reps'] == [3, 4, 6, 3]


def test_resnet50_at_its_widths_builds():
    model = ResNet50({'inputs_shapes': (3, 32, 32), 'classes': 1000})
    assert 25.0e6 < sum(p.numel() for p in model.model.parameters()) < 26.0e6     # the paper's 25.6 M


def test_the_norm_of_the_config_reaches_every_layer_shortcuts_included():
    # a projection shortcut made its own BatchNorm whatever the block's normalization_type: a layer-norm ResNet
    # was then batch-dependent, not exact across ranks or replicas
    for model_class, options in [(ResNet50, _RES), (SEResNet18, _SE)]:
        model = model_class({'inputs_shapes': (3, 16, 16), 'classes': 5, **options,
                             'common/normalization_type': 'layer'})
        norms = [m for m in model.model.modules() if isinstance(m, (torch.nn.BatchNorm2d, torch.nn.GroupNorm))]
        assert norms and all(isinstance(m, torch.nn.GroupNorm) and m.num_groups == 1 for m in norms)


def _network(model_class, options):
    if (model_class, options) in SEGMENTERS:
        return model_class({'inputs/images/shape': (1, 16, 16), 'inputs/masks/classes': 2, **options}).model
    return model_class({'inputs_shapes': (3, 16, 16), 'classes': 5, **options}).model


UNITS = [(ResNet50, _RES), (DenseNet121, _DENSE), (EfficientNetB0, _EFF), (VGG16, _VGG), (UNet, _SEG)]


@pytest.mark.parametrize('model_class, options', UNITS, ids=[c.__name__ for c, _ in UNITS])
def test_the_default_sharding_units_are_blocks_that_run(model_class, options):
    from flowpipe.parallel.engines.sharded import sharding_units
    network = _network(model_class, options)
    units = sharding_units(network, None)
    # FSDP2 shards only modules with a forward of their own: an encoder's stages in a ModuleList were refused
    assert units and all(type(unit).forward is not torch.nn.Module.forward for unit in units)
    assert sum(p.numel() for unit in units for p in unit.parameters()) == sum(p.numel() for p in network.parameters())
    names = {id(module): name for name, module in network.named_modules()}
    expected = {ResNet50: [3, 4, 6, 3], DenseNet121: [6, 12, 24, 16], EfficientNetB0: [1, 2, 2, 3, 3, 4, 1],
                VGG16: [1] * 5}.get(model_class, [])
    for stage, count in enumerate(expected):     # a stage of repeated blocks gives one unit per block
        inside = [names[id(unit)] for unit in units if names[id(unit)].startswith(f'body.block{stage}')]
        assert len(inside) == count and (count > 1 or inside == [f'body.block{stage}'])


def test_the_default_sharding_units_of_a_deep_resnet_are_its_residual_blocks():
    from flowpipe.parallel.engines.sharded import sharding_units
    network = _network(ResNet152, _RES)
    names = {id(module): name for name, module in network.named_modules()}
    units = [names[id(unit)] for unit in sharding_units(network, None)]
    assert units[0] == 'initial_block' and units[-1] == 'head' and len(units) == 2 + 3 + 8 + 36 + 3
    assert [unit for unit in units if unit.startswith('body.block2.')] == [
        f'body.block2.parts.0.parts.{index}' for index in range(36)]
    assert all(type(module).__name__ == 'MultiLayer' for module in sharding_units(network, None)[1:-1])


def test_an_encoder_and_a_decoder_name_their_stage_parts():
    network = UNet({'inputs/images/shape': (1, 16, 16), 'inputs/masks/classes': 2, **_SEG}).model
    assert [name for name, _ in network.encoder.named_children()][:3] == ['block0', 'skip0', 'downsample0']
    assert [name for name, _ in network.decoder.named_children()][:3] == ['upsample0', 'combine0', 'block0']
    assert network.decoder.stages[1] is network.decoder.combine0
    assert any(key.startswith('encoder.block0.') for key in network.state_dict())


def test_a_file_with_the_stage_parts_in_one_list_still_loads():
    """Files written while an encoder's and a decoder's stage parts were one list ``stages`` keep them under
    ``<part>.stages.<index>.``: they load into the named children, each weight in its place."""
    torch.manual_seed(0)
    saved = UNet({'inputs/images/shape': (1, 16, 16), 'inputs/masks/classes': 2, **_SEG}).model
    torch.manual_seed(1)
    fresh = UNet({'inputs/images/shape': (1, 16, 16), 'inputs/masks/classes': 2, **_SEG}).model
    listed = {}
    for key, value in saved.state_dict().items():
        part, child, rest = key.split('.', 2) if key.count('.') >= 2 else (key, '', '')
        names = [name for _, _, name in getattr(getattr(saved, part, None), 'steps', [])]
        listed[f'{part}.stages.{names.index(child)}.{rest}' if child in names else key] = value
    assert any('.stages.' in key for key in listed) and not any('encoder.block0.' in key for key in listed)
    fresh.load_state_dict(listed)
    assert all(torch.equal(value, saved.state_dict()[key]) for key, value in fresh.state_dict().items())
