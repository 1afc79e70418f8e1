"""Cells of 03_devices.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 03. Devices and micro-batches

Where a model runs is one config key, `device`; how a batch is cut into smaller pieces is another,
`microbatch`. This tutorial uses *logical CPU devices* `'CPU:0'`, `'CPU:1'`...: distinct model replicas that
all compute on the CPU. Every multi-device code path runs this way on a machine without GPUs; on a GPU machine
write `['GPU:0', 'GPU:1']` instead and nothing else changes.

The rule behind both keys: **a training step gives the same updated parameters whatever the devices and the
micro-batch size**, up to floating-point reordering. This holds for networks without batch-dependent layers;
BatchNorm is the exception, shown at the end."""),
    ('code', """
import numpy as np
import torch

from flowpipe import B, C, D, V, Pipeline
from flowpipe.models.torch import SimpleCNN
from flowpipe.opensets import Digits

digits = Digits()"""),
    ('md', """
## A device list in a pipeline

The model config reads `device` and `microbatch` from the pipeline config with `C(...)`, so the same template
trains on one device or several. `D.num_classes` and `B.image_shape` are evaluated on the first batch."""),
    ('code', """
model_config = {'inputs/images/shape': B.image_shape,
                'inputs/labels/classes': D.num_classes,
                'initial_block/inputs': 'images',
                'device': C('device', default=None),
                'microbatch': C('microbatch', default=None),
                'optimizer': {'name': 'Adam', 'lr': 3e-3}}

template = (Pipeline()
            .init_variable('loss_history', [])
            .init_model('dynamic', SimpleCNN, 'cnn', config=model_config)
            .to_array()
            .multiply(1 / 255)
            .train_model('cnn', fetches='loss', images=B.images, labels=B.labels,
                         save_to=V('loss_history', mode='a'), use_lock=True))

torch.manual_seed(0)
two_devices = template << digits.train << {'device': ['CPU:0', 'CPU:1'], 'microbatch': 16}
two_devices.run(50, shuffle=True, n_epochs=2, seed=0)
print(f"{len(two_devices.v('loss_history'))} batches, last loss {two_devices.v('loss_history')[-1]:.3f}")"""),
    ('md', """
## The device plan

`model.device_plan(batch_size)` describes the placement: the replicas, how a batch is cut into micro-batches,
how each micro-batch is split into shards, and how the losses are weighted. The model's repr ends with the same
description for the last batch size it trained on (24 here: 2 epochs of 1,437 items cut into batches of 50
leave a short last batch).

A batch of 50 with `microbatch=16` becomes chunks of 16, 16, 16 and 2 items (the last one is never dropped or
padded); each chunk is split over the replicas in balanced shards (sizes differ by at most one). Each piece's
loss is weighted by `piece_size / batch_size`, so the summed gradients are exactly the full-batch gradient and
the optimizer steps once per batch."""),
    ('code', """
model = two_devices.m('cnn')
print(model.device_plan(50))
print()
print(model)"""),
    ('md', """
A batch that does not divide by the number of devices is fine, and a batch smaller than the number of devices
leaves some replicas idle:"""),
    ('code', """
three = SimpleCNN({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10,
                   'initial_block/inputs': 'images', 'device': ['CPU:0', 'CPU:1', 'CPU:2']})
print(three.device_plan(10))
print(three.device_plan(2))"""),
    ('md', """
## Same step, any layout

One training step on the same batch from the same initial weights, on one device and on three devices with
micro-batches of 8. The network has no BatchNorm and computes in float64, so the parameters agree to rounding
error (`'dtype': 'float64'` makes the model float64; float inputs are cast to the parameters' dtype)."""),
    ('code', """
batch = digits.train.create_batch(digits.train.indices[:30]).to_array().multiply(1 / 255)


def one_step(device, microbatch=None, batch_norm=False):
    torch.manual_seed(0)                                  # the same initial weights every time
    model = SimpleCNN({'inputs/images/shape': batch.image_shape, 'inputs/labels/classes': 10,
                       'initial_block/inputs': 'images', 'batch_norm': batch_norm, 'dtype': 'float64',
                       'device': device, 'microbatch': microbatch, 'optimizer': {'name': 'SGD', 'lr': 0.1}})
    loss = model.train(images=batch.images, labels=batch.labels, fetches='loss')
    return loss, [p.detach().clone() for p in model.model.parameters()]


def max_difference(first, second):
    return max(float((a - b).abs().max()) for a, b in zip(first[1], second[1]))


single = one_step('CPU:0')
sharded = one_step(['CPU:0', 'CPU:1', 'CPU:2'], microbatch=8)
no_bn_difference = max_difference(single, sharded)
print(f"loss {single[0]:.6f} vs {sharded[0]:.6f}; largest parameter difference {no_bn_difference:.1e}")"""),
    ('md', """
## BatchNorm uses per-shard statistics

A BatchNorm layer normalizes with the mean and variance of the items it sees. On several devices each replica
sees its own shard, and with micro-batches each chunk is normalized on its own, as in PyTorch's
`DistributedDataParallel` without `SyncBatchNorm`. The update then depends on the layout: smaller pieces mean noisier
statistics. The running statistics used in evaluation are averaged over the replicas after each step.

Training still works (`docs/parallel.md` measures the accuracy), but keep shards and micro-batches of a few
dozen items for a network with BatchNorm, or use one without it (`'batch_norm': False` for the ready networks)
when results must not depend on the layout.

![Per-shard BatchNorm](../img/batchnorm_shards.png)"""),
    ('code', """
single_bn = one_step('CPU:0', batch_norm=True)
sharded_bn = one_step(['CPU:0', 'CPU:1', 'CPU:2'], microbatch=8, batch_norm=True)
bn_difference = max_difference(single_bn, sharded_bn)
print(f"loss {single_bn[0]:.6f} vs {sharded_bn[0]:.6f}; largest parameter difference {bn_difference:.1e}")"""),
    ('md', """
## Other forms of `device`

- `None`: the best single device (the first GPU, else the CPU);
- a name, case-insensitive, `GPU` meaning `cuda`: `'cpu'`, `'CPU:1'`, `'GPU:0'`, `'cuda:1'`;
- an anchored pattern: `'GPU:*'` all GPUs, `'GPU:[0-3]'`;
- `'GPU:0x4'`: four replicas on one device (`'CPU:0x2'` on a CPU);
- a list of any of these. A name that matches no device raises a `DeviceError` listing what is available.

Model parallelism (`device_map`), unequal devices (`device_weights`) and `torchrun` are described in
`docs/parallel.md`."""),
    ('code', """
print(SimpleCNN({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10,
                 'initial_block/inputs': 'images', 'device': 'CPU:0x2'}).device_plan(9))"""),
]
