"""Grad-CAM: the map equals relu(sum_c mean-gradient_c * A_c), scaled per item, for a network where both are known;
the layer by module, name or default; the classes explained; the model's parameters and mode untouched."""
import numpy as np
import pytest
import torch
from torch import nn

from flowpipe.models.torch import SimpleCNN, TorchModel
from flowpipe.models.torch.gradcam import grad_cam

pytestmark = pytest.mark.usefixtures('default_dtype')


def make_network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 4))


def expected_map(network, images, classes):
    """The linear head of a mean: d logit_k / d A_c is W[k, c] / (h * w) at every position."""
    with torch.no_grad():
        features = network[0](images).double().numpy()
    weights = network[3].weight.detach().double().numpy()[classes] / (images.shape[2] * images.shape[3])
    cam = np.maximum(np.einsum('nc,nchw->nhw', weights, features), 0)
    low, high = cam.min(axis=(1, 2), keepdims=True), cam.max(axis=(1, 2), keepdims=True)
    return (cam - low) / (high - low)


def test_map_matches_its_definition_and_leaves_the_network_alone():
    network = make_network().train()
    images = torch.randn(3, 2, 6, 5, generator=torch.Generator().manual_seed(1))
    predicted = network.eval()(images).argmax(1).numpy()
    network.train()
    cam = grad_cam(network, images.numpy(), layer=network[0])
    assert cam.shape == (3, 6, 5) and cam.dtype == np.float32
    np.testing.assert_allclose(cam, expected_map(network, images, predicted), atol=1e-5)
    assert network.training and all(parameter.grad is None for parameter in network.parameters())
    by_name = grad_cam(network, images, layer='0', cam_class=2)
    np.testing.assert_allclose(by_name, expected_map(network, images, [2, 2, 2]), atol=1e-5)
    default = grad_cam(network, images, cam_class=2)        # the last output with spatial dimensions
    np.testing.assert_allclose(default, by_name)


def test_other_gradients():
    network = make_network()
    images = torch.randn(2, 2, 4, 4, generator=torch.Generator().manual_seed(2))
    onehot = np.eye(4)[[1, 3]]
    np.testing.assert_allclose(grad_cam(network, images, gradient_mode='targets', targets=onehot),
                               expected_map(network, images, [1, 3]), atol=1e-5)
    np.testing.assert_allclose(grad_cam(network, images, gradient_mode=np.eye(4)[[0]]),
                               expected_map(network, images, [0, 0]), atol=1e-5)
    assert grad_cam(network, images, gradient_mode='prediction').shape == (2, 4, 4)


def test_model_method():
    model = SimpleCNN({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 3,
                       'initial_block/inputs': 'images'})
    cam = model.get_gradcam(np.random.default_rng(0).random((2, 1, 8, 8)), cam_class=1)
    assert cam.ndim == 3 and len(cam) == 2 and 0 <= cam.min() and cam.max() <= 1
    custom = TorchModel({'model': make_network(), 'inputs/images/shape': (2, 4, 4), 'loss': 'mse'})
    assert custom.get_gradcam(torch.randn(1, 2, 4, 4), layer='0').shape == (1, 4, 4)


def test_errors():
    network = make_network()
    images = torch.randn(1, 2, 4, 4)
    with pytest.raises(ValueError, match="one of the network's modules"):
        grad_cam(network, images, layer='head')
    with pytest.raises(ValueError, match='not in it'):
        grad_cam(network, images, layer=nn.Conv2d(1, 1, 1))
    with pytest.raises(ValueError, match='convolutional'):
        grad_cam(network, images, layer=network[3])
    with pytest.raises(ValueError, match='gradient_mode'):
        grad_cam(network, images, gradient_mode='onehots')
    with pytest.raises(ValueError, match='cam_class in'):
        grad_cam(network, images, cam_class=9)
    with pytest.raises(ValueError, match='targets=None'):
        grad_cam(network, images, gradient_mode='targets')
    with pytest.raises(ValueError, match='spatial'):
        grad_cam(nn.Linear(3, 2), torch.randn(2, 3))
