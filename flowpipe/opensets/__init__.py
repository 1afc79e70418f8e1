"""Open data sets: ``Digits`` (shipped inside flowpipe), ``MNIST``, ``CIFAR10``, ``Imagenette320``.

Each has ``train`` and ``test`` datasets of ``ImagesBatch``, ``num_classes`` and ``classes``, and accepts
``path=`` (the folder with the publisher's files) and ``bar=True`` (progress while loading).
"""
from .base import Openset
from .cifar import CIFAR10
from .digits import Digits
from .imagenette import Imagenette320
from .mnist import MNIST

__all__ = ['CIFAR10', 'Digits', 'Imagenette320', 'MNIST', 'Openset']
