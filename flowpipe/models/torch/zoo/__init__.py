"""The model zoo on the layout language: each class a ``TorchModel`` whose ``default_config`` gives batchflow's
sections (every one can be changed in the model config)."""
from .densenet import DenseNet121, DenseNet169, DenseNet201, DenseNet264
from .efficientnet import (EfficientNetB0, EfficientNetB1, EfficientNetB2, EfficientNetB3, EfficientNetB4,
                           EfficientNetB5, EfficientNetB6, EfficientNetB7)
from .resnet import (ResNet50, ResNet101, ResNet152, ResNeXt18, ResNeXt34, ResNeXt50, ResNeXt101, ResNeXt152,
                     SEResNet18, SEResNet34, SEResNet50, SEResNet101, SEResNet152, SEResNeXt18, SEResNeXt34,
                     SEResNeXt50, SEResNeXt101, SEResNeXt152)
from .unet import DenseUNet, EncoderDecoder, ResUNet, UNet
from .vgg import VGG16, VGG19

__all__ = ['DenseNet121', 'DenseNet169', 'DenseNet201', 'DenseNet264', 'DenseUNet', 'EfficientNetB0', 'EfficientNetB1',
           'EfficientNetB2', 'EfficientNetB3', 'EfficientNetB4', 'EfficientNetB5', 'EfficientNetB6', 'EfficientNetB7',
           'EncoderDecoder', 'ResNeXt101', 'ResNeXt152', 'ResNeXt18', 'ResNeXt34', 'ResNeXt50', 'ResNet101',
           'ResNet152', 'ResNet50', 'ResUNet', 'SEResNeXt101', 'SEResNeXt152', 'SEResNeXt18', 'SEResNeXt34',
           'SEResNeXt50', 'SEResNet101', 'SEResNet152', 'SEResNet18', 'SEResNet34', 'SEResNet50', 'UNet', 'VGG16',
           'VGG19']
assert __all__ == sorted(__all__)
