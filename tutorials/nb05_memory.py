"""Cells of 05_memory_and_microbatches.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 05. Memory and micro-batches

A batch that does not fit in a device's memory can still be trained on, in pieces: run forward and backward on
one *micro-batch* at a time, let the gradients add up, and step the optimizer once at the end. This is
**gradient accumulation**; in flowpipe it is the model config key `microbatch`. This notebook

1. writes gradient accumulation by hand in PyTorch and shows `microbatch` computes the same step;
2. measures what it saves: the activations kept for backward shrink with the micro-batch, while the
   gradients, the optimizer state and the weights do not; and what it costs: time;
3. shows, with numbers, the one case where it changes the result: BatchNorm on tiny pieces.

It runs in about a minute on two CPU cores."""),
    ('code', """
import time
import warnings

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, C, D, V, Pipeline
from flowpipe.models.torch import TorchModel
from flowpipe.opensets import Digits

digits = Digits()
batch = digits.train.create_batch(digits.train.indices[:64]).resize((32, 32)).to_array()
images = torch.as_tensor(batch.images) / 255           # 64 images of 1x32x32
labels = torch.as_tensor(batch.labels, dtype=torch.int64)"""),
    ('md', """
## Gradient accumulation by hand

The loss of a batch is the mean over its items. Cut the batch into chunks, and weight each chunk's mean loss by
`chunk_size / batch_size`: the weighted losses add up to the batch's loss, so their gradients, accumulated in
`.grad` by successive `backward()` calls, add up to the batch's gradient. Chunks need not be equal (64 items in
chunks of 24 leave a last chunk of 16)."""),
    ('code', """
def make_network(norm='batch'):
    def block(channels_in, channels_out):
        norm_layer = nn.BatchNorm2d(channels_out) if norm == 'batch' else nn.GroupNorm(4, channels_out)
        return [nn.Conv2d(channels_in, channels_out, 3, padding=1), norm_layer, nn.ReLU()]
    return nn.Sequential(*block(1, 16), nn.MaxPool2d(2), *block(16, 32), nn.MaxPool2d(2), *block(32, 64),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def accumulated_step(network, optimizer, chunk):
    optimizer.zero_grad()
    for x, y in zip(images.double().split(chunk), labels.split(chunk)):
        loss = F.cross_entropy(network(x), y) * (len(x) / len(images))
        loss.backward()                                  # adds to .grad
    optimizer.step()                                     # once per batch


torch.manual_seed(0)
by_hand = make_network('group').double()                  # GroupNorm: no batch statistics (see the end)
torch.manual_seed(0)
with_key = TorchModel({'inputs/images/shape': (1, 32, 32), 'inputs/labels/classes': 10,
                       'initial_block/inputs': 'images', 'model': make_network('group').double(),
                       'optimizer': {'name': 'SGD', 'lr': 0.1}, 'microbatch': 24})
accumulated_step(by_hand, torch.optim.SGD(by_hand.parameters(), lr=0.1), chunk=24)
with_key.train(images=images, labels=labels)
accumulation_difference = max(float((a - b).detach().abs().max())
                              for a, b in zip(by_hand.parameters(), with_key.model.parameters()))
print(with_key.device_plan(64))
print(f'largest parameter difference: {accumulation_difference:.1e}')"""),
    ('md', """
## Measuring the memory of activations

During forward, autograd keeps the tensors backward will need: the inputs of convolutions, the outputs of
ReLUs, the normalized values of normalization layers. These *saved tensors* are the activation memory, and
they live until backward frees them. `torch.autograd.graph.saved_tensors_hooks` calls a function on each
tensor as it is saved; counting the distinct storages behind them (views share storage; parameters, which are
saved too but exist anyway, are left out) measures the activation memory of one forward pass.

`Measured` wraps a network and records that number for every training forward (on a replica's own thread too:
the recorder is shared by the copies flowpipe makes of the network). With micro-batches, one forward is one
piece, and a piece's saved tensors are freed by its backward before the next piece runs, so the largest record
of a step is that step's peak activation memory on a device."""),
    ('code', """
class Recorder(list):
    def __deepcopy__(self, memo):                        # replicas of a network share one recorder
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
                storage = tensor.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            outputs = self.network(x)
        self.recorder.append(sum(storages.values()))
        return outputs"""),
    ('md', """
## What shrinks and what does not

The same batch of 64 through the same network (float32, Adam) with `microbatch` None, 32, 16 and 8. For each,
after a few steps: the peak activation memory of a step, the memory of the gradients (one value per
parameter), of Adam's state (two values per parameter) and of the weights, and the median time of a step."""),
    ('code', """
def mib(nbytes):
    return nbytes / 2 ** 20


def measure(microbatch, steps=5):
    recorder = Recorder()
    torch.manual_seed(0)
    model = TorchModel({'inputs/images/shape': (1, 32, 32), 'inputs/labels/classes': 10,
                        'initial_block/inputs': 'images', 'model': Measured(make_network(), recorder),
                        'optimizer': 'Adam', 'microbatch': microbatch})
    times = []
    for _ in range(steps):
        recorder.clear()
        start = time.perf_counter()
        model.train(images=images, labels=labels)
        times.append(time.perf_counter() - start)
    parameters = list(model.model.parameters())
    state = [value for per_parameter in model.optimizer.state.values() for value in per_parameter.values()
             if torch.is_tensor(value) and value.dim() > 0]
    return {'microbatch': microbatch, 'pieces': len(recorder), 'activations': max(recorder),
            'gradients': sum(p.grad.numel() * p.grad.element_size() for p in parameters),
            'optimizer state': sum(t.numel() * t.element_size() for t in state),
            'weights': sum(p.numel() * p.element_size() for p in parameters),
            'step ms': 1000 * float(np.median(times))}


rows = [measure(microbatch) for microbatch in (None, 32, 16, 8)]
print(f"{'microbatch':>10} {'pieces':>6} {'activations':>12} {'gradients':>10} {'Adam state':>10} "
      f"{'weights':>8} {'step':>8}")
for row in rows:
    print(f"{str(row['microbatch']):>10} {row['pieces']:>6} {mib(row['activations']):>8.2f} MiB "
          f"{mib(row['gradients']):>6.2f} MiB {mib(row['optimizer state']):>6.2f} MiB {mib(row['weights']):>4.2f} MiB "
          f"{row['step ms']:>5.1f} ms")
activation_ratio = rows[-1]['activations'] / rows[0]['activations']
print(f'activations with microbatch=8: {activation_ratio:.2f} of the whole batch')"""),
    ('md', """
Reading the table:

- **Activations shrink in proportion to the micro-batch**: 8 items instead of 64 keep about an eighth of the
  saved tensors alive. This is what lets a batch that does not fit train anyway.
- **Gradients, optimizer state and weights do not shrink**: they have one (Adam: three) value per parameter
  whatever the batch. For a big network they can dominate; then micro-batches do not help and model
  parallelism (`06_model_parallel`) or sharded optimizer states do.
- **Time grows** as pieces get smaller: more, smaller kernel calls, each with a fixed cost, and less work per
  call to spread over cores. On a GPU the same holds once a piece no longer fills the device. So use the
  largest micro-batch that fits, not the smallest.

The counts are the saved tensors of forward, a lower bound of what a step allocates: backward needs
temporaries too, and allocators keep freed memory. `bench/microbatch_memory.py` measures a whole ResNet18 step
in resident memory; `docs/parallel.md` lists its figures. On a GPU, `torch.cuda.max_memory_allocated()` around a
step gives the device's own peak.

## The exception: BatchNorm on tiny pieces

BatchNorm normalizes with the mean and variance of the items it sees. With micro-batches (and shards on several
devices) it sees one piece at a time, so the statistics are those of the piece, and the result depends on the
layout. With pieces of a few dozen items this barely matters (`docs/parallel.md` measures it). With pieces of
one or two items it breaks training. The layout below is `{'device': [2 devices], 'microbatch': 2}`: each
micro-batch of 2 items is split over 2 devices, so every BatchNorm layer sees **one item** at a time.

Each run trains the network of this notebook on Digits for 2 epochs, batches of 64, Adam; then the test
accuracy."""),
    ('code', """
config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
          'initial_block/inputs': 'images', 'model': C('network'), 'device': C('device'),
          'microbatch': C('microbatch'), 'optimizer': {'name': 'Adam', 'lr': 1e-2}}
template = (Pipeline()
            .init_variable('loss_history', [])
            .init_model('dynamic', TorchModel, 'cnn', config=config)
            .to_array()
            .multiply(1 / 255)
            .train_model('cnn', fetches='loss', images=B.images, labels=B.labels,
                         save_to=V('loss_history', mode='a')))
test = digits.test.create_batch(digits.test.indices).to_array()

layouts = {'BatchNorm, one device': (None, None, 'batch'),
           'BatchNorm, 2 devices x microbatch 2': (['CPU:0', 'CPU:1'], 2, 'batch'),
           'BatchNorm, 2 devices x microbatch 16': (['CPU:0', 'CPU:1'], 16, 'batch'),
           'GroupNorm, one device': (None, None, 'group'),
           'GroupNorm, 2 devices x microbatch 2': (['CPU:0', 'CPU:1'], 2, 'group')}
results, caught = {}, {}
for name, (device, microbatch, norm) in layouts.items():
    pipeline = template << digits.train << {'device': device, 'microbatch': microbatch,
                                            'network': lambda norm=norm: make_network(norm)}
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter('always')
        pipeline.run(64, shuffle=True, n_epochs=2, drop_last=True, seed=0)
    model = pipeline.m('cnn')
    accuracy = float(np.mean(model.predict(images=test.images / 255, fetches='labels') == test.labels))
    results[name] = (float(np.mean(pipeline.v('loss_history')[-5:])), accuracy)
    caught[name] = [str(w.message) for w in found if w.category.__name__ == 'BatchNormShardWarning']
    model.close()

print(f"{'layout':<38} {'final loss':>10} {'test accuracy':>13}")
for name, (loss, accuracy) in results.items():
    print(f'{name:<38} {loss:>10.3f} {accuracy:>13.3f}')"""),
    ('md', """
With one item per piece, BatchNorm's statistics are those of a single image, the running statistics used at
evaluation are averages of single images, and training goes nowhere. flowpipe does not let this pass silently:
the model warned, once, with the numbers and the fixes:"""),
    ('code', """
print(caught['BatchNorm, 2 devices x microbatch 2'][0])
warned_only_for_tiny_pieces = [name for name, messages in caught.items() if messages]
print(warned_only_for_tiny_pieces)"""),
    ('md', """
The fixes, in the order to try them:

- **larger pieces**: a micro-batch of 16 over 2 devices gives pieces of 8 and trains as well as one device
  (the warning's threshold is 8 items per piece; `flowpipe.models.torch.checks.BATCHNORM_MIN_ITEMS`);
- **fewer devices, or a larger batch**, for the same reason;
- **a batch-independent normalization**: GroupNorm (or LayerNorm) normalizes each item by itself, so the layout
  does not change the result at all (compare its two rows); on this small network it trains slower than
  BatchNorm in 2 epochs, a property of the layer, not of the layout;
- **synchronized BatchNorm** computes the statistics over all devices of a step (across processes), at the price
  of one more communication per layer; it does not help micro-batches, which run one after another.

The same story for flowpipe's `SimpleCNN` (also with BatchNorm) in four layouts, made by
`tutorials/make_figures.py`: the curves of one device, 2 replicas and pieces of 8 stay together, pieces of one
item do not train.

![Loss per layout, BatchNorm with pieces of 8 and of 1](../img/loss_curves.png)

Even where training works, one step with BatchNorm on pieces is not the one-device step, while without
BatchNorm it is, to rounding error:

![One step in several layouts vs one device](../img/batchnorm_shards.png)"""),
]
