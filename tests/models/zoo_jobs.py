"""What the zoo's distributed tests run in every rank of a ``flowpipe.parallel.launch`` job and in one process
alone: one network per family at tiny widths, two training steps on a global batch of 8 (each rank its contiguous
part), float64 parameters, a layer norm for the exact runs (BatchNorm normalizes each rank's part by itself, so it
is exact only on one piece: docs/parallel.md); each returns plain data (numpy arrays, lists, names)."""
import os
import warnings

import numpy as np
import torch
from torch import nn

from flowpipe.models.torch import (VGG16, DenseNet121, EfficientNetB0, EncoderDecoder, ResNet50, SEResNeXt50,
                                   UNet)
from flowpipe.models.torch.checks import BatchNormShardWarning
from flowpipe.models.torch.layers import MultiLayer
from flowpipe.parallel import distributed

from .test_zoo import _DENSE, _EFF, _ENC, _NEXT, _RES, _SEG, _VGG

#: name -> (class, tiny options, segmenter)
FAMILIES = {'ResNet50': (ResNet50, _RES, False), 'SEResNeXt50': (SEResNeXt50, _NEXT, False),
            'DenseNet121': (DenseNet121, _DENSE, False), 'EfficientNetB0': (EfficientNetB0, _EFF, False),
            'VGG16': (VGG16, _VGG, False), 'UNet': (UNet, _SEG, True), 'EncoderDecoder': (EncoderDecoder, _ENC, True)}
N_ITEMS, SIDE = 8, 16


def batch(segmenter):
    """The global batch: images, and labels or masks (a quarter of the pixels ignored, unevenly over the ranks)."""
    rng = np.random.default_rng(0)
    images = rng.random((N_ITEMS, 3, SIDE, SIDE))
    if not segmenter:
        return images, np.arange(N_ITEMS) % 5
    masks = (rng.random((N_ITEMS, SIDE, SIDE)) > 0.5).astype('int64')
    masks[:3, :8] = -1
    return images, masks


def make(name, norm='layer', **config):
    """The family's network, float64, Adam; the loss a sum (classifiers) or a mean over the pixels not ignored
    (segmenters), so neither is a mean over items."""
    model_class, options, segmenter = FAMILIES[name]
    shapes = ({'inputs/images/shape': (3, SIDE, SIDE), 'inputs/masks/classes': 2} if segmenter else
              {'inputs_shapes': (3, SIDE, SIDE), 'classes': 5})
    loss = nn.CrossEntropyLoss(ignore_index=-1) if segmenter else nn.CrossEntropyLoss(reduction='sum')
    torch.manual_seed(0)
    return model_class({**shapes, **options, 'dtype': 'float64', 'optimizer': {'name': 'Adam', 'lr': 0.01},
                        'loss': loss, 'common/normalization_type': norm, **config})


def full(tensor):
    """The whole tensor of a ``DTensor`` shard (an all-gather), a plain tensor as it is, as numpy."""
    gather = getattr(tensor, 'full_tensor', None)
    return (tensor if gather is None else gather()).detach().cpu().numpy().copy()


def _part():
    world, rank = distributed.world_size(), distributed.rank()
    return slice(rank * N_ITEMS // world, (rank + 1) * N_ITEMS // world)


def train(name, norm='layer', steps=2, **config):
    """``steps`` steps of the family on this rank's part of the global batch; the model, its losses and full
    parameters."""
    model = make(name, norm, **config)
    images, targets = batch(FAMILIES[name][2])
    part = _part()
    losses = [model.train(images[part], targets[part], fetches='loss', seed=step) for step in range(1, steps + 1)]
    return model, {'loss': losses, 'params': [full(p) for p in model.model.parameters()]}


def one_process():
    """Every family on the whole batch in this process (the reference)."""
    return {name: train(name)[1] for name in FAMILIES}


def fsdp_units(model):
    """The names of the network's modules that are FSDP units (the root: ``''``)."""
    from torch.distributed.fsdp import FSDPModule
    return [name for name, module in model.model.named_modules() if isinstance(module, FSDPModule)]


def ranks(folder):
    """In each rank: every family under DDP (micro-batches of 3) and under ``'sharding': 'full'`` (its units and
    a model file saved into ``folder`` by every rank, and the sharded model's predictions of the whole batch);
    ResNet50 and EfficientNetB0 sharded with ``sharding_units=MultiLayer``; ResNet50 with its BatchNorm under DDP
    (its buffers)."""
    distributed.init()
    result = {'ddp': {}, 'full': {}}
    for name in FAMILIES:
        result['ddp'][name] = train(name, microbatch=3)[1]
        model, result['full'][name] = train(name, sharding='full')
        model.save(os.path.join(folder, f'{name}.model'))
        images, _ = batch(FAMILIES[name][2])
        result['full'][name]['predictions'] = model.predict(images)
        result['full'][name]['units'] = fsdp_units(model)
    result['layer_units'] = {}
    for name in ('ResNet50', 'EfficientNetB0'):           # a unit per residual block, MBConv block, layer
        model, result['layer_units'][name] = train(name, sharding='full', sharding_units=MultiLayer)
        result['layer_units'][name]['units'] = fsdp_units(model)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', BatchNormShardWarning)       # 4 items a rank: the warning is expected
        model, result['batch_norm'] = train('ResNet50', norm='batch')
    result['batch_norm']['buffers'] = [b.numpy().copy() for b in model.model.buffers() if b.is_floating_point()]
    return result
