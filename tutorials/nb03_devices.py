"""Cells of 03_devices.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 03. Devices and micro-batches

Where a model runs is one config key, `device`; how a batch is cut into smaller pieces is another,
`microbatch`. This notebook trains the same network on the same data on one device, on several replicas, and on
replicas with micro-batches, and measures each: time per epoch, peak activation memory per step, accuracy.
Then it shows why a batch no longer needs to divide by the number of devices, how to give unequal devices
unequal shares (`device_weights`), and several replicas on one device (`'GPU:0x4'`).

It uses *logical CPU devices* `'CPU:0'`, `'CPU:1'`...: distinct model replicas that all compute on the CPU.
Every multi-device code path runs this way on a machine without GPUs; on a GPU machine write
`['GPU:0', 'GPU:1']` and nothing else changes. The rule behind both keys: **a training step gives the same
updated parameters whatever the devices and the micro-batch size**, up to floating-point rounding, for networks
without batch-dependent layers (BatchNorm is the exception, see `05_memory_and_microbatches`).

How it works inside, in plain PyTorch: `04_data_parallel_from_scratch`. What micro-batches save and cost:
`05_memory_and_microbatches`. A model too big for one device: `06_model_parallel`. Several processes, on one
machine or many: `07_distributed`. It runs in about a minute."""),
    ('code', """
import time

import numpy as np
import torch
from torch import nn

from flowpipe import B, C, D, V, Pipeline
from flowpipe.models.torch import SimpleCNN, TorchModel
from flowpipe.models.torch.networks import SimpleCNNNetwork
from flowpipe.opensets import Digits
from flowpipe.parallel import make_plan

digits = Digits()
test = digits.test.create_batch(digits.test.indices).to_array()"""),
    ('md', """
## One template, any layout

The model config reads `device` and `microbatch` from the pipeline config with `C(...)`, so one template
trains on one device or several. To measure activation memory, the network is wrapped in `Measured`, which
counts the bytes autograd saves for backward in each training forward (`05_memory_and_microbatches` explains
the measure): with replicas and micro-batches one forward is one piece, so the largest count is the peak
activation memory a device holds during a step."""),
    ('code', """
class Recorder(list):
    def __deepcopy__(self, memo):                        # the replicas of a network share one recorder
        return self


class Measured(nn.Module):
    def __init__(self, network, recorder):
        super().__init__()
        self.network, self.recorder = network, recorder

    def forward(self, x):
        if not torch.is_grad_enabled():
            return self.network(x)
        storages = {}

        def pack(tensor):
            if not (tensor.is_leaf and tensor.requires_grad):          # parameters are not activations
                storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            outputs = self.network(x)
        self.recorder.append(sum(storages.values()))
        return outputs


model_config = {'inputs/images/shape': B.image_shape,
                'inputs/labels/classes': D.num_classes,
                'initial_block/inputs': 'images',
                'model': C('network'),
                'device': C('device', default=None),
                'microbatch': C('microbatch', default=None),
                'optimizer': {'name': 'Adam', 'lr': 1e-2}}

template = (Pipeline()
            .init_variable('loss_history', [])
            .init_model('dynamic', TorchModel, 'cnn', config=model_config)
            .resize((16, 16))
            .to_array()
            .multiply(1 / 255)
            .train_model('cnn', fetches='loss', images=B.images, labels=B.labels,
                         save_to=V('loss_history', mode='a')))"""),
    ('md', """
## The measured table

Each layout trains from the same initial weights (the run's seed sets them) on the same shuffled batches of 64
for 3 epochs. Time per epoch is wall-clock time; accuracy is on the held-out part."""),
    ('code', """
warm_up = template << digits.train << {'network': lambda: SimpleCNNNetwork((1, 16, 16), 10)}
warm_up.run(64, n_iters=3, seed=0)                        # first-use costs (kernels, caches) out of the timings
warm_up.m('cnn').close()

layouts = {'one device': (None, None),
           '2 replicas': (['CPU:0', 'CPU:1'], None),
           '3 replicas': (['CPU:0', 'CPU:1', 'CPU:2'], None),
           '2 replicas, microbatch 16': (['CPU:0', 'CPU:1'], 16)}
table, pipelines = {}, {}
for name, (device, microbatch) in layouts.items():
    recorder = Recorder()
    network = lambda recorder=recorder: Measured(SimpleCNNNetwork((1, 16, 16), 10, filters=(16, 32, 64)), recorder)
    pipeline = template << digits.train << {'device': device, 'microbatch': microbatch, 'network': network}
    start = time.perf_counter()
    pipeline.run(64, shuffle=True, n_epochs=3, drop_last=True, seed=0)
    seconds = (time.perf_counter() - start) / 3
    model = pipeline.m('cnn')
    predicted = model.predict(images=test.resize((16, 16)).images / 255, fetches='labels')
    table[name] = (seconds, max(recorder) / 2 ** 20, float(np.mean(predicted == test.labels)))
    pipelines[name] = pipeline

print(f"{'layout':<28} {'s / epoch':>9} {'peak activations / device':>26} {'accuracy':>9}")
for name, (seconds, activations, accuracy) in table.items():
    print(f'{name:<28} {seconds:>9.2f} {activations:>22.2f} MiB {accuracy:>9.3f}')"""),
    ('md', """
How to read it:

- **Accuracy**: every layout trains well. The steps are the same except for BatchNorm, whose statistics come
  from each piece (64, 32, 21 or 8 items here), which is enough to move a 3-epoch accuracy by a few points.
- **Peak activations per device** fall with the piece each device computes: half the batch on each of 2
  replicas, a third on 3, and a quarter of a micro-batch of 16 (8 items) with micro-batches on 2 replicas. That
  is the memory a device must have for a batch of 64.
- **Time per epoch** on logical CPU devices says little about GPUs: the replicas share this machine's cores.
  Each replica runs on its own thread, so with one torch thread per replica two replicas can use two cores
  at once; with torch's default threads one device already uses every core and replicas only add the work of
  splitting, reducing and broadcasting. On GPUs each replica has a device of its own and the pieces run at the
  same time. Smaller pieces cost time per item (more, smaller kernel calls): micro-batches trade time for
  memory (`05_memory_and_microbatches` measures both).

## The device plan

`model.device_plan(batch_size)` describes the placement: the replicas, how a batch is cut into micro-batches,
how each micro-batch is split into shards, and how the losses are weighted. The model's repr ends with the same
description for the last batch size it trained on.

![How a batch is cut into micro-batches and shards](../img/batch_split.png)

In a step, each replica runs forward and backward on its pieces, the gradients are summed on the first
(primary) replica, the optimizer steps once, and the new weights are copied back to the replicas:

![One data-parallel step](../img/replicas.png)"""),
    ('code', """
model = pipelines['2 replicas, microbatch 16'].m('cnn')
print(model.device_plan(50))
print()
print(model)"""),
    ('md', """
## Why the batch need not divide by the number of devices

A data-parallel step must give the gradient of the whole batch. If every shard's mean loss counted equally,
shards would have to be of equal size. flowpipe weights each piece's mean loss by `piece_size / batch_size`
instead, so the weighted losses add up to the batch's mean loss, and the gradients to the batch's gradient,
for any sizes. 64 items over 3 replicas are shards of 22, 21 and 21; a batch smaller than the number of
devices leaves some replicas idle; nothing is dropped or padded:"""),
    ('code', """
print(pipelines['3 replicas'].m('cnn').device_plan(64))
print(pipelines['3 replicas'].m('cnn').device_plan(2))"""),
    ('md', """
## Same step, any layout

One training step on the same batch from the same initial weights, on one device and on three devices with
micro-batches of 8 (pieces of 3, 3 and 2 items). Without BatchNorm and in float64 (`'dtype': 'float64'`), the
parameters agree to rounding error."""),
    ('code', """
batch = digits.train.create_batch(digits.train.indices[:30]).to_array().multiply(1 / 255)


def one_step(device, microbatch=None, device_weights=None):
    torch.manual_seed(0)                                  # the same initial weights every time
    model = SimpleCNN({'inputs/images/shape': batch.image_shape, 'inputs/labels/classes': 10,
                       'initial_block/inputs': 'images', 'batch_norm': False, 'dtype': 'float64',
                       'device': device, 'microbatch': microbatch, 'device_weights': device_weights,
                       'optimizer': {'name': 'SGD', 'lr': 0.1}})
    loss = model.train(images=batch.images, labels=batch.labels, fetches='loss')
    model.close()
    return loss, [p.detach().clone() for p in model.model.parameters()]


def max_difference(first, second):
    return max(float((a - b).abs().max()) for a, b in zip(first[1], second[1]))


single = one_step('CPU:0')
sharded = one_step(['CPU:0', 'CPU:1', 'CPU:2'], microbatch=8)
no_bn_difference = max_difference(single, sharded)
print(f"loss {single[0]:.6f} vs {sharded[0]:.6f}; largest parameter difference {no_bn_difference:.1e}")"""),
    ('md', """
## Unequal devices: `device_weights`

With a fast and a slow GPU, equal shards make the fast one wait. `device_weights` gives each device a share
proportional to its weight (largest-remainder rounding, so the shares always add up to the batch). The step
is still the full-batch step, because the loss weights follow the actual shard sizes:"""),
    ('code', """
print(make_plan(['CPU:0', 'CPU:1'], device_weights=[3, 1]).describe(30))
weighted = one_step(['CPU:0', 'CPU:1'], device_weights=[3, 1])
weighted_difference = max_difference(single, weighted)
print(f'largest parameter difference from one device: {weighted_difference:.1e}')"""),
    ('md', """
Choose the weights from measured throughput (items per second of each device on this model), not from the
devices' names.

## Several replicas on one device

`'GPU:0x4'` puts four replicas on one GPU (named `cuda:0#0` ... `cuda:0#3`), each running its shard on its own
CUDA stream: it can help when one replica's pieces are too small to fill the GPU, and it tests multi-device
code on a single GPU. `'CPU:0x2'` does the same on the CPU. The plan of `'GPU:0x4'`, described here for a
machine with one GPU (`num_gpus=1`, since this one may have none), and a `'CPU:0x2'` model that really runs:"""),
    ('code', """
print(make_plan('GPU:0x4', num_gpus=1).describe(64))
two_on_one = SimpleCNN({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10,
                        'initial_block/inputs': 'images', 'device': 'CPU:0x2'})
print(two_on_one.device_plan(9))
two_on_one.close()"""),
    ('md', """
## Other forms of `device`

- `None`: the best single device (the first GPU, else the CPU);
- a name, case-insensitive, `GPU` meaning `cuda`: `'cpu'`, `'CPU:1'`, `'GPU:0'`, `'cuda:1'`;
- an anchored pattern: `'GPU:*'` all GPUs, `'GPU:[0-3]'`;
- `'GPU:0x4'`: four replicas on one device;
- a list of any of these. A name that matches no device raises a `DeviceError` listing what is available.

Replicas of a model hold worker threads; `model.close()` stops them (a model that is garbage-collected stops
them too). Next: `04_data_parallel_from_scratch` writes this all out in plain PyTorch."""),
    ('code', """
for pipeline in pipelines.values():
    pipeline.m('cnn').close()"""),
]
