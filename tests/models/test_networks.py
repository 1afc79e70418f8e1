"""Ready networks: named parts, sizes that adapt to the input shape, clear shape errors."""
import pytest
import torch

from flowpipe.models.torch.networks import MLPNetwork, ResNetNetwork, SimpleCNNNetwork, VGGNetwork, resnet18, resnet34

FACTORIES = [MLPNetwork, SimpleCNNNetwork, VGGNetwork, resnet18, resnet34]


@pytest.mark.parametrize('factory', FACTORIES)
@pytest.mark.parametrize('shape', [(1, 8, 8), (3, 32, 32), (3, 5, 7)])
def test_output_has_one_row_per_item_and_one_column_per_output(factory, shape):
    network = factory(shape, 7).eval()
    assert network(torch.randn(3, *shape)).shape == (3, 7)


@pytest.mark.parametrize('factory', FACTORIES)
def test_top_level_children_are_initial_block_body_head(factory):
    names = [name for name, _ in factory((3, 16, 16), 4).named_children()]
    assert names == ['initial_block', 'body', 'head']


def test_resnet_stem_downsamples_large_images_only():
    small, large = resnet18((3, 16, 16), 2), resnet18((3, 64, 64), 2)
    assert small.initial_block(torch.randn(1, 3, 16, 16)).shape[-1] == 16
    assert large.initial_block(torch.randn(1, 3, 64, 64)).shape[-1] == 16


def test_feature_maps_stay_at_least_two_pixels_so_one_item_shards_train():
    network = resnet18((3, 32, 32), 3).train()
    features = network.body(network.initial_block(torch.randn(1, 3, 32, 32)))
    assert features.shape[-2:] == (2, 2)
    network(torch.randn(1, 3, 32, 32)).sum().backward()  # batch norm on one item works


def test_resnet34_is_deeper_than_resnet18():
    assert len(resnet34((3, 8, 8), 2).body) == 16 and len(resnet18((3, 8, 8), 2).body) == 8


def test_widths_are_configurable():
    network = ResNetNetwork((1, 8, 8), 2, layers=(1, 1), filters=(8, 16), initial_filters=4, batch_norm=False)
    assert network.head[-1].in_features == 16
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in network.modules())
    assert MLPNetwork((4,), 2, units=(5,)).head.in_features == 5


@pytest.mark.parametrize('factory', [SimpleCNNNetwork, VGGNetwork, resnet18])
def test_image_networks_need_channels_first_shape(factory):
    with pytest.raises(ValueError, match=r'\(channels, height, width\)'):
        factory((32, 32), 10)


def test_mismatched_stage_lists_are_rejected():
    with pytest.raises(ValueError, match='repeats'):
        VGGNetwork((3, 8, 8), 2, filters=(8, 16), repeats=(1,))
    with pytest.raises(ValueError, match='layers'):
        ResNetNetwork((3, 8, 8), 2, layers=(1,), filters=(8, 16))
