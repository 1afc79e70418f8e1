"""Cells of 04_data_parallel_from_scratch.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 04. Data parallelism from scratch

`device=['GPU:0', 'GPU:1']` hides four steps that every data-parallel system performs for each batch:

1. **split** the batch into one shard per device;
2. **run** a replica of the model on each shard: forward, loss, backward;
3. **all-reduce** the gradients: combine the replicas' gradients so that each step uses the gradient of the
   whole batch;
4. **update and broadcast**: step the optimizer and make sure every replica holds the same new weights.

This notebook writes the four steps in plain PyTorch, in a few short cells, then shows that one flowpipe config
key computes the same thing, to 1e-12. It uses three *logical* devices on the CPU: three model replicas that
all compute on the same cores, so it runs anywhere (replace the devices by `cuda:0`, `cuda:1`... on a GPU
machine). It runs in seconds."""),
    ('code', """
import copy

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe.models.torch import TorchModel
from flowpipe.opensets import Digits

digits = Digits()
batch = digits.train.create_batch(digits.train.indices[:50]).to_array()
images = torch.as_tensor(batch.images, dtype=torch.float64) / 255    # 50 images, (1, 8, 8) each
labels = torch.as_tensor(batch.labels, dtype=torch.int64)
print(images.shape, labels.shape)"""),
    ('md', """
## A model and one reference step

A small convolutional network without BatchNorm (BatchNorm is the exception to everything below; see
`05_memory_and_microbatches`). It computes in float64 so that the comparisons are exact up to rounding.
`reference` is the step we must reproduce: one SGD step (with momentum) on the whole batch."""),
    ('code', """
def make_network():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(16, 10)).double()


def sgd(parameters):
    return torch.optim.SGD(parameters, lr=0.1, momentum=0.9)


reference = make_network()
reference_optimizer = sgd(reference.parameters())
for step in range(3):                                   # three steps on the same batch, to involve momentum
    reference_optimizer.zero_grad()
    F.cross_entropy(reference(images), labels).backward()
    reference_optimizer.step()"""),
    ('md', """
## 1. Split the batch

Shards are contiguous slices of the batch. 50 items over 3 devices do not divide evenly, and they need not:
the shards get 17, 17 and 16 items (the first shards take the extra ones). What makes uneven shards correct is
the weighting in the next step."""),
    ('code', """
devices = ['cpu', 'cpu', 'cpu']                          # three logical devices; 'cuda:0', 'cuda:1'... on GPUs


def split(tensor, parts):
    return list(torch.tensor_split(tensor, parts))


image_shards, label_shards = split(images, len(devices)), split(labels, len(devices))
print([len(shard) for shard in image_shards])"""),
    ('md', """
## 2. Run a replica on each shard

Every device holds an identical copy of the model (a *replica*). Each computes the mean loss of its shard and
backpropagates it. The mean over a shard of 17 items is not the mean over the batch of 50: weighting each
shard's mean loss by `shard_size / batch_size` makes the weighted losses add up to the batch's mean loss, and
so the gradients add up to the batch's gradient, whatever the shard sizes.

On GPUs the replicas run at the same time (one thread or one process per device); here they run one after
another, which gives the same numbers."""),
    ('code', """
replicas = [make_network().to(device) for device in devices]   # identical copies: same seed, same weights
optimizers = [sgd(replica.parameters()) for replica in replicas]


def forward_backward(replica, shard_images, shard_labels, batch_size):
    loss = F.cross_entropy(replica(shard_images), shard_labels)
    weighted = loss * (len(shard_images) / batch_size)
    weighted.backward()
    return weighted.item()"""),
    ('md', """
## 3. All-reduce the gradients

After backward, replica *i* holds the gradient of its own shard. An **all-reduce** sums a tensor over all
replicas and leaves the sum on every one of them. Written out: gather the sum on the first replica, then copy it
back. (Collective libraries do this with less traffic, e.g. the ring all-reduce of NCCL, but the result is the
same sum.)"""),
    ('code', """
@torch.no_grad()
def all_reduce_gradients(replicas):
    for parameters in zip(*(replica.parameters() for replica in replicas)):
        total = parameters[0].grad.clone()
        for other in parameters[1:]:
            total += other.grad.to(total.device)
        for parameter in parameters:
            parameter.grad.copy_(total.to(parameter.device))"""),
    ('md', """
## 4. Update and broadcast

Now every replica holds the full-batch gradient. There are two ways to keep the replicas identical:

- **every replica steps its own optimizer** with the same gradient (what PyTorch's `DistributedDataParallel`
  does): the weights stay equal because every replica does the same arithmetic;
- **one optimizer step on the first replica, then broadcast its weights** to the others (what flowpipe does
  inside one process: one optimizer state instead of one per device).

The first way, three times, then a check that the replicas agree and match the reference step:"""),
    ('code', """
def data_parallel_step():
    for optimizer in optimizers:
        optimizer.zero_grad()
    losses = []
    for replica, x, y, device in zip(replicas, split(images, 3), split(labels, 3), devices):
        losses.append(forward_backward(replica, x.to(device), y.to(device), len(images)))
    all_reduce_gradients(replicas)
    for optimizer in optimizers:
        optimizer.step()
    return sum(losses)                                   # the full-batch mean loss


for step in range(3):
    print(f'step {step}: loss {data_parallel_step():.6f}')


def largest_difference(first, second):
    return max(float((a.detach().cpu() - b.detach().cpu()).abs().max())
               for a, b in zip(first.parameters(), second.parameters()))


replicas_agree = max(largest_difference(replicas[0], other) for other in replicas[1:])
by_hand_difference = largest_difference(replicas[0], reference)
print(f'replicas differ by {replicas_agree:.1e}; replica 0 differs from the full-batch steps by {by_hand_difference:.1e}')"""),
    ('md', """
The second way, broadcasting: one optimizer on replica 0 steps, and its weights are copied to the others."""),
    ('code', """
replicas = [make_network().to(device) for device in devices]
primary_optimizer = sgd(replicas[0].parameters())


@torch.no_grad()
def broadcast_weights(replicas):
    for parameters in zip(*(replica.parameters() for replica in replicas)):
        for parameter in parameters[1:]:
            parameter.copy_(parameters[0].to(parameter.device))


for step in range(3):
    for replica in replicas:
        replica.zero_grad()
    for replica, x, y, device in zip(replicas, split(images, 3), split(labels, 3), devices):
        forward_backward(replica, x.to(device), y.to(device), len(images))
    all_reduce_gradients(replicas)                       # only replica 0's sum is used here: a reduce suffices
    primary_optimizer.step()
    broadcast_weights(replicas)

broadcast_difference = largest_difference(replicas[0], reference)
print(f'broadcast: replica 0 differs from the full-batch steps by {broadcast_difference:.1e}')"""),
    ('md', """
## The same with one config key

flowpipe performs exactly these steps for `device=[...]`: it splits the batch into balanced contiguous shards,
weights each shard's loss by its share, sums the gradients onto the primary replica, steps one optimizer and
broadcasts the weights. A `TorchModel` given the same network (`'model'`), the same optimizer and three logical
devices ends at the same weights:"""),
    ('code', """
flowpipe_model = TorchModel({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10,
                             'initial_block/inputs': 'images', 'model': make_network(),
                             'optimizer': {'name': 'SGD', 'lr': 0.1, 'momentum': 0.9},
                             'device': ['CPU:0', 'CPU:1', 'CPU:2']})
print(flowpipe_model.device_plan(50))
for step in range(3):
    flowpipe_model.train(images=images, labels=labels)

flowpipe_difference = largest_difference(flowpipe_model.model, reference)
from_scratch_difference = largest_difference(flowpipe_model.model, replicas[0])
print(f'flowpipe vs full-batch steps: {flowpipe_difference:.1e}; flowpipe vs from scratch: {from_scratch_difference:.1e}')
flowpipe_model.close()                                  # stops the replicas' worker threads"""),
    ('md', """
The differences are rounding errors of float64 (sums taken in a different order), far below 1e-12.

## What this leaves out

- **BatchNorm** computes statistics over the items it sees, so a replica normalizes its shard with the
  shard's statistics, and the split changes the result: see `05_memory_and_microbatches`.
- **Several processes.** Here all replicas live in one process and the all-reduce is a loop. Across processes
  (and machines) each process holds one replica, the data loader gives each its shard, and the all-reduce is a
  collective call (`torch.distributed.all_reduce`), which `DistributedDataParallel` overlaps with backward.
  flowpipe's multi-process training is the subject of `07_distributed` and `docs/distributed.md`.
- **Speed.** Logical CPU devices share the same cores, so they show correctness, not speed-up. On GPUs the
  replicas compute at the same time and the all-reduce is the price of adding devices."""),
]
