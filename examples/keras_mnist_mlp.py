"""The Keras multi-device MLP on flowpipe: 784-256-256-10, Adam, validation each epoch, then evaluate on the test set.

``--layout single`` trains on one device, ``data`` on replicas ``['CPU:0', 'CPU:1']`` (Keras's MirroredStrategy),
``model`` puts one layer per device with ``device_map`` (Keras's ``tf.device`` blocks). It trains on the shipped
Digits (8x8 images resized to 28x28, flattened), so it runs offline, and prints ``accuracy=<test accuracy>
steps=<optimizer steps>`` last. ``--subset N`` keeps the first N items of each part.
"""
import argparse
from collections import OrderedDict

import torch
from torch import nn

from flowpipe import B, V, Pipeline, print0
from flowpipe.callbacks import Validate
from flowpipe.models.torch import TorchModel
from flowpipe.opensets import Digits

LAYOUTS = {'single': {'device': 'CPU:0'}, 'data': {'device': ['CPU:0', 'CPU:1']},
           'model': {'device_map': {'dense1': 'CPU:0', 'dense2': 'CPU:1', 'output': 'CPU:2'}}}

parser = argparse.ArgumentParser(description='flowpipe MNIST MLP on several devices')
parser.add_argument('--epochs', type=int, default=2)
parser.add_argument('--seed', type=int, default=0)
parser.add_argument('--layout', choices=sorted(LAYOUTS), default='data')
parser.add_argument('--subset', type=int, default=None)
args = parser.parse_args()
torch.manual_seed(args.seed)

digits = Digits()
train_data, test_data = digits.train, digits.test
if args.subset:
    train_data, test_data = (part.create_subset(part.indices[:args.subset]) for part in (train_data, test_data))
train_data.split(train=0.8, validation=0.2)           # Keras's held-out tail of the training set
mlp = nn.Sequential(OrderedDict(dense1=nn.Sequential(nn.Linear(784, 256), nn.ReLU()),
                                dense2=nn.Sequential(nn.Linear(256, 256), nn.ReLU()), output=nn.Linear(256, 10)))
config = {'model': mlp, 'inputs/images/shape': (784,), 'inputs/labels/classes': 10, 'optimizer': 'Adam',
          **LAYOUTS[args.layout]}
prepare = Pipeline().resize((28, 28)).to_array().multiply(1 / 255).update(B.images, B.images.reshape(-1, 784))
train = (prepare.init_model('net', TorchModel, config=config)
         .train_model('net', images=B.images, labels=B.labels)) << train_data.train
evaluate = (prepare.import_model('net', train)
            .predict_model('net', images=B.images, labels=B.labels, fetches=['predictions', 'loss'],
                           save_to=[V('predictions', mode='e'), V('losses', mode='a')])
            .update(V('targets', mode='e'), B.labels))
validate = Validate(evaluate << train_data.validation, batch_size=256, metrics=['loss', 'accuracy'])
train.run(256, n_epochs=args.epochs, whole_epochs=True, seed=args.seed, callbacks=[validate])
test = Validate(evaluate << test_data, batch_size=256, metrics=['loss', 'accuracy']).validate()
print0(f"test loss {test['val/loss']:.4f} – test accuracy {test['val/accuracy']:.4f}")
print0(f"accuracy={test['val/accuracy']:.4f} steps={train.m('net').iteration}")
