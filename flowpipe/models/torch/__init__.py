"""PyTorch models: ``TorchModel`` configured by a dict, and ready networks built on it."""
from .blocks.network import Network
from .losses import NormalizedLoss
from .model import FETCHES, TorchModel
from .networks import MLPNetwork, ResNetNetwork, SimpleCNNNetwork, VGGNetwork, resnet18, resnet34
from .ready import MLP, ResNet, ResNet18, ResNet34, SimpleCNN, VGG7

__all__ = ['FETCHES', 'MLP', 'MLPNetwork', 'Network', 'NormalizedLoss', 'ResNet', 'ResNet18', 'ResNet34', 'ResNetNetwork', 'SimpleCNN', 'SimpleCNNNetwork',
           'TorchModel', 'VGG7', 'VGGNetwork', 'resnet18', 'resnet34']
assert __all__ == sorted(__all__)
