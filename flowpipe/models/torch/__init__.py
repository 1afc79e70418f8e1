"""PyTorch models: ``TorchModel`` configured by a dict, ready networks built on it, the layout language
(``layers``, ``blocks``, ``Network``) and the zoo on it (``zoo``)."""
from .blocks import (Block, BottleneckBlock, ConvBlock, DefaultBlock, DenseBlock, Downsample, MBConvBlock, ResBlock,
                     Upsample, VGGBlock)
from .blocks.network import Network
from .layers import MultiLayer
from .losses import NormalizedLoss
from .model import FETCHES, TorchModel
from .networks import MLPNetwork, ResNetNetwork, SimpleCNNNetwork, VGGNetwork, resnet18, resnet34
from . import safe_classes
from .ready import MLP, ResNet, ResNet18, ResNet34, SimpleCNN, VGG7
from .zoo import (VGG16, VGG19, DenseNet121, DenseNet169, DenseNet201, DenseNet264, DenseUNet, EfficientNetB0,
                  EfficientNetB1, EfficientNetB2, EfficientNetB3, EfficientNetB4, EfficientNetB5, EfficientNetB6,
                  EfficientNetB7, EncoderDecoder, ResNet50, ResNet101, ResNet152, ResNeXt18, ResNeXt34, ResNeXt50,
                  ResNeXt101, ResNeXt152, ResUNet, SEResNet18, SEResNet34, SEResNet50, SEResNet101, SEResNet152,
                  SEResNeXt18, SEResNeXt34, SEResNeXt50, SEResNeXt101, SEResNeXt152, UNet)

__all__ = ['Block', 'BottleneckBlock', 'ConvBlock', 'DefaultBlock', 'DenseBlock', 'DenseNet121', 'DenseNet169',
           'DenseNet201', 'DenseNet264', 'DenseUNet', 'Downsample', 'EfficientNetB0', 'EfficientNetB1',
           'EfficientNetB2', 'EfficientNetB3', 'EfficientNetB4', 'EfficientNetB5', 'EfficientNetB6', 'EfficientNetB7',
           'EncoderDecoder', 'FETCHES', 'MBConvBlock', 'MLP', 'MLPNetwork', 'MultiLayer', 'Network', 'NormalizedLoss',
           'ResBlock', 'ResNeXt101', 'ResNeXt152', 'ResNeXt18', 'ResNeXt34', 'ResNeXt50', 'ResNet', 'ResNet101',
           'ResNet152', 'ResNet18', 'ResNet34', 'ResNet50', 'ResNetNetwork', 'ResUNet', 'SEResNeXt101', 'SEResNeXt152',
           'SEResNeXt18', 'SEResNeXt34', 'SEResNeXt50', 'SEResNet101', 'SEResNet152', 'SEResNet18', 'SEResNet34',
           'SEResNet50', 'SimpleCNN', 'SimpleCNNNetwork', 'TorchModel', 'UNet', 'Upsample', 'VGG16', 'VGG19', 'VGG7',
           'VGGBlock', 'VGGNetwork', 'resnet18', 'resnet34']
assert __all__ == sorted(__all__)

safe_classes.register()
