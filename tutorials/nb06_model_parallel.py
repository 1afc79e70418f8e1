"""Cells of 06_model_parallel.ipynb (see make_notebooks.py)."""

CELLS = [
    ('md', """
# 06. Model parallelism

Data parallelism (`03_devices`, `04_data_parallel_from_scratch`) puts a whole copy of the model on every
device and splits the batch. When the model itself does not fit on one device, split the **model** instead:
its first layers on one device, the next ones on another, and the activations travel from device to device
during forward (and the gradients back during backward). In flowpipe that is the model config key
`device_map`. This notebook

1. writes a two-device model by hand in PyTorch;
2. does the same with `device_map={'initial_block': ..., 'body': ..., 'head': ...}` and prints the placement;
3. lets `device_map='auto'` balance the parts by their size, and shows what it can and cannot balance;
4. says when to use which.

As before it runs on logical CPU devices; on GPUs write `'GPU:0'`, `'GPU:1'`. It runs in seconds."""),
    ('code', """
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from flowpipe import B, C, D, V, Pipeline
from flowpipe.models.torch import SimpleCNN, TorchModel
from flowpipe.opensets import Digits

digits = Digits()
batch = digits.train.create_batch(digits.train.indices[:40]).to_array().multiply(1 / 255)"""),
    ('md', """
## By hand

Each part lives on its device; `forward` moves the activations to the next part's device. Nothing else is
needed: autograd follows the tensors across devices in backward, and an optimizer over all parameters updates
each on its own device. (On the CPU both "devices" are the same memory; with `'cuda:0'` and `'cuda:1'` the same
code splits the memory between two GPUs.)"""),
    ('code', """
first_device, second_device = torch.device('cpu'), torch.device('cpu')     # 'cuda:0', 'cuda:1' on GPUs


class TwoDeviceNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU()).to(first_device)
        self.classifier = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(second_device)

    def forward(self, x):
        x = self.features(x.to(first_device))
        return self.classifier(x.to(second_device))        # the activations move, the weights stay


net = TwoDeviceNet()
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
images, labels = torch.as_tensor(batch.images), torch.as_tensor(batch.labels, dtype=torch.int64)
loss = F.cross_entropy(net(images), labels.to(second_device))
loss.backward()
optimizer.step()
print(f'one step by hand, loss {loss.item():.4f}')"""),
    ('md', """
## With `device_map`

flowpipe's ready networks have three named top-level parts, `initial_block`, `body` and `head`; any
`nn.Module` given as `'model'` has its own top-level children. `device_map` maps those names to devices.
flowpipe moves each part to its device and adds a hook that moves each part's inputs to it, which is exactly
the `.to(...)` calls written above. The plan lists where each part went and how big it is."""),
    ('code', """
def cnn(device_map=None, device=None):
    torch.manual_seed(0)
    return SimpleCNN({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10,
                      'initial_block/inputs': 'images', 'batch_norm': False, 'dtype': 'float64',
                      'optimizer': {'name': 'SGD', 'lr': 0.1}, 'device_map': device_map, 'device': device})


by_hand_map = cnn({'initial_block': 'CPU:0', 'body': 'CPU:1', 'head': 'CPU:1'})
print(by_hand_map.device_plan(40))"""),
    ('md', """
Splitting a model changes where the arithmetic happens, not the arithmetic: three steps on two devices give
the parameters of three steps on one."""),
    ('code', """
one_device = cnn()
for model in (by_hand_map, one_device):
    for step in range(3):
        model.train(images=batch.images, labels=batch.labels)
split_difference = max(float((a - b).detach().abs().max())
                       for a, b in zip(by_hand_map.model.parameters(), one_device.model.parameters()))
print(f'largest parameter difference after 3 steps: {split_difference:.1e}')"""),
    ('md', """
## `device_map='auto'`

With `device_map='auto'` and a list of devices, flowpipe cuts the top-level parts, in order, into contiguous
groups, one per device, so that the largest group (by the bytes of its parameters and buffers) is as small as
possible. The plan prints the result:"""),
    ('code', """
auto_cnn = cnn('auto', ['CPU:0', 'CPU:1'])
print(auto_cnn.device_plan())
auto_placement = {name: device.name for name, device in auto_cnn.engine.placement.items()}"""),
    ('md', """
The parts are the unit: a ready network has three, and its `body` holds most of the weights, so `'auto'` can do
no better than put the body alone or nearly alone on a device. A network with more top-level children of
similar size balances well. Here an `nn.Sequential` given as `'model'`, whose nine children (named `'0'` to
`'8'`: a flatten, an input layer, six hidden blocks of equal size, the output layer) go over three devices:"""),
    ('code', """
def blocks():
    layers = [nn.Flatten(), nn.Linear(64, 256)]
    for _ in range(6):
        layers.append(nn.Sequential(nn.Linear(256, 256), nn.ReLU()))
    layers.append(nn.Linear(256, 10))
    return nn.Sequential(*layers)


deep = TorchModel({'inputs/images/shape': (1, 8, 8), 'inputs/labels/classes': 10, 'initial_block/inputs': 'images',
                   'model': blocks(), 'device_map': 'auto', 'device': ['CPU:0', 'CPU:1', 'CPU:2']})
print(deep.device_plan())
deep_loss = deep.train(images=batch.images, labels=batch.labels, fetches='loss')
deep_placement = {name: device.name for name, device in deep.engine.placement.items()}"""),
    ('md', """
## With micro-batches, in a pipeline

`device_map` is a config key like any other, so a pipeline can read it with `C(...)`, and it combines with
`microbatch`: each micro-batch runs through all the parts, one after another, and the gradients accumulate
(`05_memory_and_microbatches`), so a model split over devices can also train on batches larger than fit at once.
flowpipe runs the micro-batches one after another; it does not overlap them across the devices (a *pipeline
schedule*, as in GPipe, would keep every device busy, at the cost of more memory and complexity)."""),
    ('code', """
config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
          'initial_block/inputs': 'images', 'device_map': C('device_map'), 'microbatch': C('microbatch'),
          'optimizer': {'name': 'Adam', 'lr': 3e-3}}
template = (Pipeline()
            .init_variable('loss_history', [])
            .init_model('dynamic', SimpleCNN, 'cnn', config=config)
            .to_array()
            .multiply(1 / 255)
            .train_model('cnn', fetches='loss', images=B.images, labels=B.labels,
                         save_to=V('loss_history', mode='a')))
split = template << digits.train << {'device_map': {'initial_block': 'CPU:0', 'body': 'CPU:1', 'head': 'CPU:1'},
                                     'microbatch': 32}
print(split.m('cnn').device_plan(64))                   # before any batch: the plan of the declared model
split.run(64, shuffle=True, n_epochs=2, drop_last=True, seed=0)
losses = split.v('loss_history')
print(f'{len(losses)} batches, loss {np.mean(losses[:5]):.3f} -> {np.mean(losses[-5:]):.3f}')
print(split.m('cnn').device_plan(64))"""),
    ('md', """
## When to use which

| the problem | the key | what it costs |
|---|---|---|
| training is too slow, the model fits on one device | `device=['GPU:0', 'GPU:1', ...]` (data parallel) | a gradient all-reduce per step; a model copy per device |
| a batch's activations do not fit | `microbatch=k` | time: more, smaller kernel calls |
| the weights, gradients and optimizer state do not fit | `device_map` (model parallel) | the devices wait on each other; activations cross devices |

Model parallelism does not make a step faster: in a step, one device computes while the others wait for its
activations. Use it to fit a model, not to speed one up; when the model fits, data parallelism uses all
devices at once."""),
]
