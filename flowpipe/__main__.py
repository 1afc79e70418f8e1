"""``python -m flowpipe demo`` (also the ``flowpipe-demo`` script): train a network on the shipped Digits data set;
``python -m flowpipe verify``: replay steps of a run checkpoint on another layout (``flowpipe.execution.verify``).

The demo is the README's first program on Digits: a dynamic model whose input shape and class count come from the
data, images resized to 32x32, a prefetching run with a progress bar, then the held-out accuracy.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Sequence

__all__ = ['demo', 'demo_main', 'main']

MODELS = ('ResNet18', 'SimpleCNN', 'ResNet34', 'VGG7', 'MLP')


def _device(text: str) -> str | list[str]:
    """``'cpu'`` stays a string; ``'CPU:0,CPU:1'`` becomes a list of devices (replicas)."""
    parts = [part.strip() for part in text.split(',') if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"Expected a device such as 'cpu' or 'CPU:0,CPU:1'. Received: {text!r}.")
    return parts[0] if len(parts) == 1 else parts


def demo(model: str = 'ResNet18', device: str | list[str] | None = None, microbatch: int | None = None,
         epochs: int = 2, lr: float = 1e-3, batch_size: int = 64, seed: int = 0, bar: bool = True) -> float:
    """Train ``model`` on Digits for ``epochs`` and return the accuracy on the held-out part."""
    import numpy as np
    import torch

    from . import B, C, D, Pipeline, V
    from .models import torch as models
    from .opensets import Digits

    torch.manual_seed(seed)
    dataset = Digits(bar=bar)
    config = {'inputs/images/shape': B.image_shape, 'inputs/labels/classes': D.num_classes,
              'initial_block/inputs': 'images', 'device': C('device'), 'microbatch': C('microbatch'),
              'optimizer': {'name': 'Adam', 'lr': lr}}
    template = (Pipeline()
                .init_variable('loss', None)
                .init_model('dynamic', getattr(models, model), 'net', config=config)
                .resize((32, 32))
                .to_array()
                .train_model('net', fetches='loss', images=B.images, labels=B.labels, save_to=V('loss'),
                             use_lock=True))
    train = template << dataset.train << {'device': device, 'microbatch': microbatch}
    train.run(batch_size, shuffle=seed, n_epochs=epochs, drop_last=True, prefetch=4,
              bar={'bar': bar, 'monitors': ['loss'], 'desc': f'{model} on Digits'} if bar else False)
    test = (Pipeline()
            .init_variable('predicted', [])
            .init_variable('true', [])
            .import_model('net', train)
            .update(V('true', mode='e'), B.labels)
            .resize((32, 32))
            .to_array()
            .predict_model('net', images=B.images, fetches='labels', save_to=V('predicted', mode='e'))
            ) << dataset.test
    test.run(256, n_epochs=1)
    if bar:
        print(train.m('net'))
    train.m('net').close()
    return float(np.mean(np.asarray(test.v('predicted')) == np.asarray(test.v('true'))))


DEMO_HELP = 'train a network on the shipped Digits data set and print its accuracy'
VERIFY_HELP = ('replay the next steps of a run checkpoint on another layout and print the largest relative '
               'deviation of the parameters from one process on one device; beyond the tolerance, the first '
               'module whose activations or gradients differ')


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='flowpipe', description='flowpipe command line.')
    commands = parser.add_subparsers(dest='command', required=True)
    _demo_options(commands.add_parser('demo', help=DEMO_HELP, description=DEMO_HELP[0].upper() + DEMO_HELP[1:]))
    from .execution.verify import add_verify
    add_verify(commands.add_parser('verify', help=VERIFY_HELP, description=VERIFY_HELP[0].upper() + VERIFY_HELP[1:]),
               _device)
    return parser


def _demo_parser() -> argparse.ArgumentParser:
    """The parser of the ``flowpipe-demo`` script: the demo's options without a command."""
    parser = argparse.ArgumentParser(prog='flowpipe-demo', description=DEMO_HELP[0].upper() + DEMO_HELP[1:])
    _demo_options(parser)
    parser.set_defaults(command='demo')
    return parser


def _demo_options(run: argparse.ArgumentParser) -> None:
    run.add_argument('--device', type=_device, default=None,
                     help="'cpu', 'GPU:0', or a comma-separated list such as 'CPU:0,CPU:1' (default: best device)")
    run.add_argument('--microbatch', type=int, default=None, help='items per micro-batch (default: off)')
    run.add_argument('--epochs', type=int, default=2, help='passes over the training part (default: 2)')
    run.add_argument('--lr', type=float, default=1e-3, help='learning rate of Adam (default: 0.001)')
    run.add_argument('--batch-size', type=int, default=64, help='items per batch (default: 64)')
    run.add_argument('--model', choices=MODELS, default='ResNet18', help='network (default: ResNet18)')
    run.add_argument('--seed', type=int, default=0, help='seed of the weights and the shuffling (default: 0)')
    run.add_argument('--no-bar', action='store_true', help='no progress bar')


def _placement_error(args: argparse.Namespace) -> str | None:
    """The one-line error of a ``--device``/``--microbatch`` that cannot run here (it lists the devices), or None."""
    from .parallel import make_plan
    try:
        make_plan(args.device, args.microbatch)
    except (ValueError, TypeError) as error:      # DeviceError is a ValueError
        return str(error)
    return None


def demo_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowpipe-demo`` script: the demo's options only; returns the exit status."""
    return _run(_demo_parser(), list(sys.argv[1:] if argv is None else argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m flowpipe``; returns the exit status."""
    if argv is None and os.path.basename(sys.argv[0]) == 'flowpipe-demo':
        return demo_main()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0].startswith('-') and argv[0] not in ('-h', '--help'):
        argv.insert(0, 'demo')  # demo options without the command
    return _run(_parser(), argv or ['demo'])


def _run(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    args = parser.parse_args(argv)
    if args.command == 'verify':
        from .execution.verify import run_verify
        return run_verify(parser, args)
    if args.epochs < 1 or args.batch_size < 1 or args.lr <= 0:
        parser.error(f"Expected positive --epochs, --batch-size and --lr. Received: --epochs {args.epochs}, "
                     f"--batch-size {args.batch_size}, --lr {args.lr}.")
    problem = _placement_error(args)
    if problem is not None:
        print(f'{parser.prog}: error: {problem}', file=sys.stderr)
        return 2
    start = time.perf_counter()
    accuracy = demo(args.model, args.device, args.microbatch, args.epochs, args.lr, args.batch_size, args.seed,
                    bar=not args.no_bar)
    print(f'held-out accuracy: {accuracy:.4f} ({time.perf_counter() - start:.1f} s)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
