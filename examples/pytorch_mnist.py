"""pytorch/examples ``mnist/main.py`` on flowpipe: the same Net, Adadelta, StepLR per epoch, batch 64, test batch 1000.

It trains on the shipped Digits (8x8 images resized to 28x28), so it runs offline, and prints
``accuracy=<test accuracy> steps=<optimizer steps>`` last. ``--subset N`` keeps the first N items of each part;
``--no-whole-epochs``, ``--no-shuffle`` and ``--randomness torch`` are the variants docs/porting.md compares.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

from flowpipe import B, V, Pipeline, print0
from flowpipe.callbacks import Validate
from flowpipe.models.torch import TorchModel
from flowpipe.opensets import Digits


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 32, 3, 1), nn.Conv2d(32, 64, 3, 1)
        self.dropout1, self.dropout2 = nn.Dropout(0.25), nn.Dropout(0.5)
        self.fc1, self.fc2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.dropout1(F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2))
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


parser = argparse.ArgumentParser(description='flowpipe MNIST example')
parser.add_argument('--epochs', type=int, default=14)
parser.add_argument('--seed', type=int, default=1)
parser.add_argument('--device', default='cpu')
parser.add_argument('--subset', type=int, default=None)
parser.add_argument('--whole-epochs', action=argparse.BooleanOptionalAction, default=True)
parser.add_argument('--shuffle', action=argparse.BooleanOptionalAction, default=True)
parser.add_argument('--randomness', choices=['by_item', 'torch'], default='by_item')
args = parser.parse_args()
torch.manual_seed(args.seed)

digits = Digits()
train_data, test_data = digits.train, digits.test
if args.subset:
    train_data, test_data = (part.create_subset(part.indices[:args.subset]) for part in (train_data, test_data))
prepare = Pipeline().resize((28, 28)).to_array().multiply(1 / 255).normalize(0.1307, 0.3081)
config = {'model': Net(), 'inputs/images/shape': (1, 28, 28), 'inputs/labels/classes': 10, 'loss': 'nll',
          'optimizer': {'name': 'Adadelta', 'lr': 1.0}, 'device': args.device, 'randomness': args.randomness,
          'decay': {'name': 'StepLR', 'step_size': 1, 'gamma': 0.7, 'frequency': 'epoch'}}
train = (prepare.init_model('net', TorchModel, config=config)
         .train_model('net', images=B.images, labels=B.labels)) << train_data
test = (prepare.import_model('net', train)
        .predict_model('net', images=B.images, labels=B.labels, fetches=['predictions', 'loss'],
                       save_to=[V('predictions', mode='e'), V('losses', mode='a')])
        .update(V('targets', mode='e'), B.labels)) << test_data
validate = Validate(test, batch_size=1000, metrics=['accuracy', 'loss'])
train.run(64, shuffle=args.shuffle, n_epochs=args.epochs, whole_epochs=args.whole_epochs, seed=args.seed,
          callbacks=[validate])
print0(f"accuracy={validate.values['val/accuracy']:.4f} steps={train.m('net').iteration}")
