"""pytorch/examples ``mnist/main.py``'s own loop, in plain PyTorch, on the data ``examples/pytorch_mnist.py`` uses.

The shipped Digits resized to 28x28 and normalized by the port's pipeline, then ``DataLoader(batch_size=64,
shuffle=True)``, the port's ``Net`` (read from the example's source, so both train the same network), Adadelta
(lr 1.0), ``StepLR(step_size=1, gamma=0.7)`` after each epoch and the test loop, as the original writes them;
``torch.manual_seed(seed)`` first, as the original. Prints ``seed=<s> accuracy=<test accuracy> steps=<steps>``
per seed: ``python scripts/mnist_reference.py --epochs 3 --seeds 1 2 3`` (docs/porting.md).
"""
import argparse
import ast
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

from flowpipe import Pipeline
from flowpipe.opensets import Digits

EXAMPLE = Path(__file__).resolve().parents[1] / 'examples' / 'pytorch_mnist.py'


def example_net() -> type:
    """The ``Net`` class of ``examples/pytorch_mnist.py`` (that file runs when imported, so its class is read)."""
    tree = ast.parse(EXAMPLE.read_text())
    module = ast.Module([node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == 'Net'], [])
    namespace = {'torch': torch, 'nn': nn, 'F': F}
    exec(compile(module, str(EXAMPLE), 'exec'), namespace)
    return namespace['Net']


def tensors(part) -> TensorDataset:
    """One part of Digits as the port's pipeline prepares it: 28x28, scaled to [0, 1], normalized."""
    prepare = Pipeline().resize((28, 28)).to_array().multiply(1 / 255).normalize(0.1307, 0.3081)
    batch = (prepare << part).next_batch(len(part))
    return TensorDataset(torch.as_tensor(batch.images), torch.as_tensor(batch.labels))


def train_and_test(seed: int, epochs: int, shuffle: bool, net: type, train: TensorDataset,
                   test: TensorDataset) -> tuple[float, int]:
    """The original's ``main()`` for one seed: the test accuracy after the last epoch and the steps taken."""
    torch.manual_seed(seed)
    train_loader = DataLoader(train, batch_size=64, shuffle=shuffle)
    test_loader = DataLoader(test, batch_size=1000)
    model = net()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    steps = correct = 0
    for _ in range(epochs):
        model.train()
        for data, target in train_loader:
            optimizer.zero_grad()
            F.nll_loss(model(data), target).backward()
            optimizer.step()
            steps += 1
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(data).argmax(dim=1) == target).sum()) for data, target in test_loader)
        scheduler.step()
    return correct / len(test), steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--epochs', type=int, default=3)
    parser.add_argument('--seeds', type=int, nargs='+', default=[1, 2, 3])
    parser.add_argument('--shuffle', action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    digits, net = Digits(), example_net()
    train, test = tensors(digits.train), tensors(digits.test)
    for seed in args.seeds:
        accuracy, steps = train_and_test(seed, args.epochs, args.shuffle, net, train, test)
        print(f"seed={seed} accuracy={accuracy:.4f} steps={steps}", flush=True)


if __name__ == '__main__':
    main()
