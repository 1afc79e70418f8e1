"""Open data sets: ``Digits`` (shipped inside flowpipe), ``MNIST``, ``CIFAR10``, ``Imagenette320``.

Each is a ``Dataset`` of ``ImagesBatch`` over all its items (train first, then test) with ``train`` and ``test``
subsets sharing its data, has ``num_classes`` and ``classes``, and accepts ``path=`` (the folder with the
publisher's files) and ``bar=True`` (progress while loading).
"""
from .base import Openset
from .cifar import CIFAR10
from .digits import Digits
from .imagenette import Imagenette320
from .mnist import MNIST

__all__ = ['CIFAR10', 'Digits', 'Imagenette320', 'MNIST', 'Openset']
